"""DoublePrecision: everything in float64."""

from __future__ import annotations

import pytest
import torch

from torchplug.precision import DoublePrecision


def test_it_is_the_64_true_precision() -> None:
    plugin = DoublePrecision()
    assert DoublePrecision.name == "64-true"
    assert plugin.dtype == torch.float64
    assert repr(plugin) == "DoublePrecision()"
    assert plugin.state_dict() == {}


def test_convert_module_makes_parameters_double() -> None:
    module = DoublePrecision().convert_module(torch.nn.Linear(2, 2))
    assert {p.dtype for p in module.parameters()} == {torch.float64}


def test_init_and_forward_contexts_create_float64_tensors() -> None:
    plugin = DoublePrecision()
    with plugin.tensor_init_context():
        assert torch.empty(1).dtype == torch.float64
    with plugin.module_init_context():
        assert torch.nn.Linear(2, 2).weight.dtype == torch.float64
    with plugin.forward_context():
        assert torch.ones(1).dtype == torch.float64
    assert torch.get_default_dtype() == torch.float32


def test_the_init_context_restores_the_default_dtype_after_an_exception() -> None:
    with pytest.raises(RuntimeError), DoublePrecision().tensor_init_context():
        raise RuntimeError("boom")
    assert torch.get_default_dtype() == torch.float32


def test_convert_input_and_output() -> None:
    plugin = DoublePrecision()
    x, labels = plugin.convert_input((torch.randn(2), torch.tensor([1])))
    assert (x.dtype, labels.dtype) == (torch.float64, torch.int64)
    assert plugin.convert_output({"y": x})["y"].dtype == torch.float32
