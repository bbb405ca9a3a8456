"""Without torch_xla (the real state of this machine): every way in says what to install."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchplug
from tests.accel_tpu.fake import NOT_INSTALLED
from tests.accel_tpu.models import Regressor, loader, quiet
from torchplug import MisconfigurationError, PluginUnavailableError
from torchplug_tpu import (
    SingleXLAStrategy,
    TorchXLAUnavailableError,
    XLAAccelerator,
    XLAPrecision,
    XLAStrategy,
    _vendor,
)

pytestmark = pytest.mark.usefixtures("no_xla")


@pytest.mark.parametrize("name", ["tpu", "xla"])
def test_trainer_names_torch_xla_and_how_to_get_it(name: str) -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(accelerator=name)
    message = str(info.value)
    assert (
        f"Accelerator 'tpu' from accel-tpu 0.1.0 is installed but cannot run on this machine: {NOT_INSTALLED}"
        == message
    )


def test_the_accelerator_says_why_it_is_unavailable() -> None:
    assert XLAAccelerator.is_available() is False
    assert XLAAccelerator.unavailable_reason() == NOT_INSTALLED


def test_auto_passes_over_the_tpu() -> None:
    trainer = torchplug.Trainer(accelerator="auto", logger=False, enable_checkpointing=False)
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert "tpu: unavailable" in trainer.describe()


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda: XLAAccelerator.auto_device_count(), id="auto_device_count"),
        pytest.param(lambda: XLAAccelerator.parse_devices(1), id="parse_devices"),
        pytest.param(lambda: SingleXLAStrategy().root_device, id="single_xla-device"),
        pytest.param(lambda: XLAPrecision("bf16-mixed").forward_context(), id="bf16-mixed-autocast"),
        pytest.param(lambda: _vendor.sync(), id="sync"),
    ],
)
def test_using_a_plugin_raises_the_same_hint(use: object) -> None:
    with pytest.raises(TorchXLAUnavailableError) as info:
        use()  # type: ignore[operator]
    assert str(info.value) == NOT_INSTALLED
    assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_launching_the_xla_strategy_raises_the_hint(tmp_path: Path) -> None:
    strategy = XLAStrategy(parallel_devices=[torch.device("xla", 0), torch.device("xla", 1)])
    from torchplug_tpu._launcher import XLALauncher

    with pytest.raises(TorchXLAUnavailableError, match="torch_xla is not installed"):
        XLALauncher(strategy).launch(lambda: None)


def test_the_xla_strategy_on_the_cpu_asks_for_the_tpu_accelerator(tmp_path: Path) -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"strategy='xla' runs on XLA devices, but the accelerator is "
        r"CPUAccelerator\. Hint: use accelerator='tpu'",
    ):
        torchplug.Trainer(accelerator="cpu", strategy="xla", **quiet(tmp_path))


def test_the_xla_checkpoint_io_still_works_on_the_cpu(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="cpu", **quiet(tmp_path, enable_checkpointing=True, max_steps=2))
    assert type(trainer.checkpoint_io).__name__ == "TorchCheckpointIO"  # the CPU keeps the core's default
    from torchplug_xla_io import XLACheckpointIO

    trainer = torchplug.Trainer(
        accelerator="cpu", plugins=[XLACheckpointIO()], **quiet(tmp_path, enable_checkpointing=True, max_steps=2)
    )
    trainer.fit(Regressor(), loader())
    saved = trainer.checkpoint_callback.best_model_path
    assert XLACheckpointIO().load_checkpoint(saved)["global_step"] == 2
