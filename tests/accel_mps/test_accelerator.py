"""The ``mps`` accelerator on a faked Mac: devices, precisions, statistics, random state, and its reasons."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchplug
from tests.accel_mps.conftest import FakeMac
from torchplug.accelerators.torch_device import dedicated_claim
from torchplug.precision.amp import MixedPrecision
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.trainer import auto_accelerator
from torchplug_mps import MPSAccelerator


def test_available_on_a_mac_with_mps(fake_mac: FakeMac) -> None:
    assert MPSAccelerator.is_available() is True
    assert MPSAccelerator.unavailable_reason() is None
    assert MPSAccelerator.auto_device_count() == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"built": False}, "was built without MPS (torch.backends.mps.is_built() is False)"),
        ({"available": False}, "torch.backends.mps.is_available() is False: MPS needs macOS 12.3 or newer"),
    ],
)
def test_each_missing_piece_has_its_own_reason(fake_mac: FakeMac, change: dict[str, bool], reason: str) -> None:
    for key, value in change.items():
        setattr(fake_mac, key, value)
    assert MPSAccelerator.is_available() is False
    assert reason in str(MPSAccelerator.unavailable_reason())
    with pytest.raises(torchplug.PluginUnavailableError, match=reason.split("(")[0].strip()):
        torchplug.Trainer(accelerator="mps")


@pytest.mark.parametrize("devices", [1, -1, "1", "-1", "auto", [0], (0,), "0,", "[0]"])
def test_the_one_device(fake_mac: FakeMac, devices: object) -> None:
    trainer = torchplug.Trainer(accelerator="mps", devices=devices, logger=False)  # type: ignore[arg-type]
    assert isinstance(trainer.strategy, SingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("mps", 0)
    assert isinstance(trainer.accelerator, MPSAccelerator)


@pytest.mark.parametrize("devices", [2, "2", [1], [0, 1], "0,1", 0, True])
def test_more_than_one_device_is_refused_in_the_users_words(fake_mac: FakeMac, devices: object) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(accelerator="mps", devices=devices)  # type: ignore[arg-type]
    message = str(info.value)
    if devices != 0:  # devices=0 is refused by the core before the accelerator is asked
        assert (
            message == f"devices={devices!r} is not valid with the MPS accelerator. A Mac has one MPS device: "
            "use devices=1 (or -1, 'auto', [0])."
        )


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_mixed_precision_autocasts_on_mps(fake_mac: FakeMac, precision: str) -> None:
    trainer = torchplug.Trainer(accelerator="mps", precision=precision, logger=False)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision)
    assert plugin.device_type == "mps"
    assert plugin.precision == precision


@pytest.mark.parametrize(
    ("precision", "macos"),
    [("64-true", (15, 0)), ("bf16-mixed", (13, 6)), ("bf16-true", (13, 6))],
)
def test_precisions_metal_cannot_compute_are_refused(fake_mac: FakeMac, precision: str, macos: tuple[int, int]) -> None:
    fake_mac.macos = macos
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(accelerator="mps", precision=precision)
    assert str(info.value) == (
        f"precision={precision!r} is not supported by MPSAccelerator. Supported: 16-mixed, 16-true, 32-true, "
        "bf16-mixed, bf16-true."
    )


def test_device_stats_come_from_torch_mps(fake_mac: FakeMac) -> None:
    stats = MPSAccelerator().get_device_stats(torch.device("mps", 0))
    assert stats == {
        "memory_allocated_bytes": 1 << 20,
        "memory_driver_allocated_bytes": 3 << 20,
        "memory_recommended_max_bytes": 16 << 30,
    }


def test_the_random_state_round_trips_and_a_foreign_one_is_ignored_with_a_warning(fake_mac: FakeMac) -> None:
    accelerator = MPSAccelerator()
    saved = accelerator.get_rng_state()
    fake_mac.rng_state = torch.zeros(8, dtype=torch.uint8)
    accelerator.set_rng_state(saved)
    assert torch.equal(fake_mac.rng_state, torch.arange(8, dtype=torch.uint8))
    with pytest.warns(UserWarning, match="is not an MPS one"):
        accelerator.set_rng_state({"cuda": []})
    assert fake_mac.calls == ["set_rng_state"]


def test_teardown_empties_the_cache_and_setup_checks_the_device(fake_mac: FakeMac) -> None:
    accelerator = MPSAccelerator()
    accelerator.setup_device(torch.device("mps", 0))
    accelerator.teardown()
    accelerator.synchronize(torch.device("mps", 0))
    assert fake_mac.calls == ["empty_cache", "synchronize"]
    with pytest.raises(ValueError, match="cannot run on device 'cpu'"):
        accelerator.setup_device(torch.device("cpu"))


def test_auto_picks_mps_on_a_mac_and_the_generic_accelerator_steps_aside(fake_mac: FakeMac) -> None:
    auto_accelerator._reset_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", auto_accelerator.AutoAcceleratorWarning)  # other installed plugins
        trainer = torchplug.Trainer(accelerator="auto", logger=False)
    assert isinstance(trainer.accelerator, MPSAccelerator)
    assert "accelerator='auto': highest priority available (50); also available: cpu (0)" in trainer.describe()
    assert "torch: nothing to serve; " in trainer.describe()  # torch.accelerator reports no MPS here (faked)
    assert dedicated_claim("mps") == "the accelerator 'mps' from accel-mps 0.1.0"
