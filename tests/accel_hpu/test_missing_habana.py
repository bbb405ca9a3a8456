"""Without habana_frameworks (the real state of this machine): every way in says what to install."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchplug
from tests.accel_hpu.fake import NOT_INSTALLED
from tests.accel_hpu.models import quiet
from torchplug import MisconfigurationError, PluginUnavailableError, UnknownPluginError
from torchplug_hpu import HabanaUnavailableError, HPUAccelerator, HPUPrecision, _vendor

pytestmark = pytest.mark.usefixtures("no_habana")


def test_trainer_names_habana_frameworks_and_how_to_get_it() -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(accelerator="hpu")
    assert str(info.value) == (
        f"Accelerator 'hpu' from accel-hpu 0.1.0 is installed but cannot run on this machine: {NOT_INSTALLED}"
    )


def test_the_accelerator_says_why_it_is_unavailable() -> None:
    assert HPUAccelerator.is_available() is False
    assert HPUAccelerator.unavailable_reason() == NOT_INSTALLED


def test_auto_passes_over_the_hpu(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="auto", **quiet(tmp_path))
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert "hpu: unavailable" in trainer.describe()


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda: HPUAccelerator.auto_device_count(), id="auto_device_count"),
        pytest.param(lambda: HPUAccelerator.parse_devices(1), id="parse_devices"),
        pytest.param(lambda: HPUAccelerator().get_device_stats(torch.device("hpu")), id="device-stats"),
        pytest.param(lambda: HPUAccelerator().setup_device(torch.device("hpu")), id="setup_device"),
        pytest.param(lambda: HPUPrecision("fp8"), id="fp8"),
        pytest.param(lambda: _vendor.mark_step(), id="mark_step"),
        pytest.param(lambda: _vendor.import_hccl(), id="hccl"),
    ],
)
def test_using_a_plugin_raises_the_same_hint(use: object) -> None:
    with pytest.raises(HabanaUnavailableError) as info:
        use()  # type: ignore[operator]
    assert str(info.value) == NOT_INSTALLED
    assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize("strategy", ["hpu_single", "hpu_parallel"])
def test_the_hpu_strategies_on_the_cpu_ask_for_the_hpu_accelerator(tmp_path: Path, strategy: str) -> None:
    with pytest.raises(
        MisconfigurationError,
        match=rf"strategy={strategy!r} runs on HPUs, but the accelerator is "
        r"CPUAccelerator\. Hint: use accelerator='hpu'\.",
    ):
        torchplug.Trainer(accelerator="cpu", strategy=strategy, **quiet(tmp_path))


def test_fp8_on_the_cpu_points_at_accel_hpu(tmp_path: Path) -> None:
    with pytest.raises(UnknownPluginError, match=r"Unknown precision 'fp8'\..*Hint: pip install accel-hpu"):
        torchplug.Trainer(accelerator="cpu", precision="fp8", **quiet(tmp_path))


def test_bf16_mixed_needs_no_habana_to_be_created() -> None:
    precision = HPUPrecision("bf16-mixed")
    assert repr(precision) == "HPUPrecision(precision='bf16-mixed')"
