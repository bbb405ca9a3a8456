"""The XLA precisions, and how the user's precision names map to them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

import torchplug
from tests.accel_tpu.models import quiet
from torchplug import MisconfigurationError
from torchplug_tpu import XLAPrecision

pytestmark = pytest.mark.usefixtures("fake_xla")


@pytest.mark.parametrize(
    ("given", "registry_name", "mode"),
    [
        (None, "xla-32-true", "32-true"),
        ("32-true", "xla-32-true", "32-true"),
        ("32", "xla-32-true", "32-true"),
        ("bf16-true", "xla-bf16-true", "bf16-true"),
        ("16-true", "xla-16-true", "16-true"),
        ("half", "xla-16-true", "16-true"),
        ("bf16-mixed", "xla-bf16-mixed", "bf16-mixed"),
        ("bf16", "xla-bf16-mixed", "bf16-mixed"),
        ("xla-bf16-true", "xla-bf16-true", "bf16-true"),
    ],
)
def test_trainer_maps_the_users_precision_to_the_xla_one(
    tmp_path: Path, given: str | None, registry_name: str, mode: str
) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", precision=given, **quiet(tmp_path))
    plugin = trainer.precision_plugin
    assert isinstance(plugin, XLAPrecision) and plugin.precision == mode
    line = next(line for line in trainer.describe().splitlines() if line.startswith("precision"))
    assert f"precision            {registry_name}  (" in line
    if given is not None and given != registry_name:
        assert f"mapped to {registry_name!r}" in line


@pytest.mark.parametrize("given", ["16-mixed", "64-true", "16"])
def test_precisions_xla_cannot_train_in_are_refused_with_the_choices(tmp_path: Path, given: str) -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"is not supported on XLA devices \(accelerator='tpu'\)\. Choose "
        r"one of '32-true', 'bf16-true', '16-true', 'bf16-mixed'\. Hint: ",
    ):
        torchplug.Trainer(accelerator="tpu", precision=given, **quiet(tmp_path))


def test_a_precision_instance_is_used_as_given(tmp_path: Path) -> None:
    precision = XLAPrecision("bf16-true")
    trainer = torchplug.Trainer(accelerator="tpu", plugins=[precision], **quiet(tmp_path))
    assert trainer.precision_plugin is precision


def test_bf16_true_casts_the_model_inputs_and_default_dtype_then_outputs_back() -> None:
    precision = XLAPrecision("bf16-true")
    module = precision.convert_module(torch.nn.Linear(2, 2))
    assert module.weight.dtype == torch.bfloat16
    batch = precision.convert_input({"x": torch.ones(2), "label": torch.tensor([1])})
    assert batch["x"].dtype == torch.bfloat16 and batch["label"].dtype == torch.int64
    with precision.forward_context():
        assert torch.get_default_dtype() == torch.bfloat16
    with precision.tensor_init_context():
        assert torch.empty(1).dtype == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32
    assert precision.convert_output(torch.ones(1, dtype=torch.bfloat16)).dtype == torch.float32


def test_16_true_is_float16() -> None:
    precision = XLAPrecision("xla-16-true")
    assert precision.dtype == torch.float16 and precision.precision == "16-true"
    assert precision.convert_module(torch.nn.Linear(2, 2)).weight.dtype == torch.float16


def test_32_true_changes_nothing() -> None:
    precision = XLAPrecision()
    module = torch.nn.Linear(2, 2)
    data = torch.ones(2)
    assert precision.convert_module(module) is module and precision.convert_input(data) is data
    assert precision.convert_output(data) is data
    with precision.forward_context(), precision.tensor_init_context():
        assert torch.get_default_dtype() == torch.float32


def test_bf16_mixed_keeps_float32_weights_and_autocasts_through_torch_xla(fake_state: ModuleType) -> None:
    precision = XLAPrecision("bf16-mixed")
    module = precision.convert_module(torch.nn.Linear(2, 2))
    assert module.weight.dtype == torch.float32
    with precision.forward_context():
        out = module(torch.ones(1, 2))
    assert out.dtype == torch.bfloat16  # the fake's torch_xla.amp.autocast autocasts on the CPU
    assert "amp.autocast" in fake_state.calls
    assert precision.convert_output(out).dtype == torch.float32


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"precision='fp8' is not supported by XLAPrecision; choose "
        r"'32-true', 'bf16-true', '16-true', 'bf16-mixed'\.",
    ):
        XLAPrecision("fp8")
    assert repr(XLAPrecision("xla-bf16-mixed")) == "XLAPrecision(precision='bf16-mixed')"
