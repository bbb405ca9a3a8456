"""HalfPrecision: everything in float16 or bfloat16."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.precision import HalfPrecision

DTYPES = {"16-true": torch.float16, "bf16-true": torch.bfloat16}
HALVES = pytest.mark.parametrize(("precision", "dtype"), list(DTYPES.items()), ids=list(DTYPES))


@pytest.mark.parametrize("precision", ["8-true", "16-mixed", "half", "bf16"])
def test_an_unsupported_precision_lists_the_valid_ones(precision: str) -> None:
    expected = f"precision={precision!r} is not supported by HalfPrecision; choose '16-true' or 'bf16-true'"
    with pytest.raises(MisconfigurationError, match=re.escape(expected)):
        HalfPrecision(precision=precision)


@HALVES
def test_the_precision_is_kept_and_shown(precision: str, dtype: torch.dtype) -> None:
    plugin = HalfPrecision(precision=precision)
    assert (plugin.precision, plugin.dtype) == (precision, dtype)
    assert repr(plugin) == f"HalfPrecision(precision={precision!r})"
    assert plugin.state_dict() == {}


@HALVES
def test_convert_module_casts_parameters_and_floating_buffers(precision: str, dtype: torch.dtype) -> None:
    module = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    converted = HalfPrecision(precision).convert_module(module)
    assert {p.dtype for p in converted.parameters()} == {dtype}
    assert converted[1].running_mean.dtype == dtype
    assert converted[1].num_batches_tracked.dtype == torch.int64


@HALVES
def test_init_contexts_create_half_tensors_and_modules(precision: str, dtype: torch.dtype) -> None:
    plugin = HalfPrecision(precision)
    with plugin.tensor_init_context():
        assert torch.empty(2).dtype == dtype
        assert torch.arange(3).dtype == torch.int64
    with plugin.module_init_context():
        assert torch.nn.Linear(2, 2).weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32


@HALVES
def test_the_init_context_restores_the_default_dtype_after_an_exception(precision: str, dtype: torch.dtype) -> None:
    plugin = HalfPrecision(precision)
    with pytest.raises(KeyError), plugin.tensor_init_context():
        raise KeyError("boom")
    assert torch.get_default_dtype() == torch.float32


@HALVES
def test_the_init_context_restores_a_non_default_dtype(precision: str, dtype: torch.dtype) -> None:
    torch.set_default_dtype(torch.float64)
    try:
        with HalfPrecision(precision).module_init_context():
            pass
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


@HALVES
def test_the_forward_context_makes_new_tensors_match_the_weights(precision: str, dtype: torch.dtype) -> None:
    plugin = HalfPrecision(precision)
    with plugin.forward_context():
        assert torch.zeros(1).dtype == dtype
    assert torch.get_default_dtype() == torch.float32


@dataclasses.dataclass
class Batch:
    features: torch.Tensor
    labels: torch.Tensor


@HALVES
def test_convert_input_casts_only_floating_point_tensors(precision: str, dtype: torch.dtype) -> None:
    data = {"x": torch.randn(2), "nested": [Batch(torch.randn(2), torch.tensor([1, 0]))], "name": "a"}
    converted = HalfPrecision(precision).convert_input(data)
    assert converted["x"].dtype == dtype
    assert converted["nested"][0].features.dtype == dtype
    assert converted["nested"][0].labels.dtype == torch.int64
    assert converted["name"] == "a"


@HALVES
def test_convert_output_returns_float32(precision: str, dtype: torch.dtype) -> None:
    out = HalfPrecision(precision).convert_output((torch.ones(2, dtype=dtype), torch.tensor([3])))
    assert [t.dtype for t in out] == [torch.float32, torch.int64]
