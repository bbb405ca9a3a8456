"""Without poptorch (the real state of this machine): every way in says what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

import torchplug
from tests.accel_ipu.fake import NOT_INSTALLED
from tests.accel_ipu.models import loader, quiet
from torchplug import MisconfigurationError, PluginUnavailableError
from torchplug_ipu import IPUAccelerator, IPUPrecision, IPUStrategy, PoptorchUnavailableError

pytestmark = pytest.mark.usefixtures("no_poptorch")


def test_trainer_names_poptorch_and_how_to_get_it() -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(accelerator="ipu")
    assert str(info.value) == (
        f"Accelerator 'ipu' from accel-ipu 0.1.0 is installed but cannot run on this machine: {NOT_INSTALLED}"
    )


def test_the_accelerator_says_why_it_is_unavailable() -> None:
    assert IPUAccelerator.is_available() is False
    assert IPUAccelerator.unavailable_reason() == NOT_INSTALLED


def test_auto_passes_over_the_ipu(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="auto", **quiet(tmp_path))
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert "ipu: unavailable" in trainer.describe()


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda: IPUAccelerator.auto_device_count(), id="auto_device_count"),
        pytest.param(lambda: IPUAccelerator.parse_devices(1), id="parse_devices"),
        pytest.param(lambda: IPUStrategy().training_options, id="strategy-options"),
        pytest.param(lambda: IPUStrategy().process_dataloader(loader()), id="dataloader"),
        pytest.param(lambda: IPUPrecision("16-mixed").forward_context(), id="16-mixed-autocast"),
    ],
)
def test_using_a_plugin_raises_the_same_hint(use: object) -> None:
    with pytest.raises(PoptorchUnavailableError) as info:
        use()  # type: ignore[operator]
    assert str(info.value) == NOT_INSTALLED
    assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_the_ipu_strategy_on_the_cpu_asks_for_the_ipu_accelerator(tmp_path: Path) -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"strategy='ipu' compiles the model for IPUs, but the accelerator "
        r"is CPUAccelerator\. Hint: use accelerator='ipu'\.",
    ):
        torchplug.Trainer(accelerator="cpu", strategy="ipu", **quiet(tmp_path))


def test_ipu_precision_names_on_the_cpu_still_resolve_to_the_core(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="cpu", precision="16-true", **quiet(tmp_path))
    assert type(trainer.precision_plugin).__name__ == "HalfPrecision"
