"""The ``tpu`` accelerator against the fake torch_xla: devices, availability, stats and the core's questions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_tpu.fake import subprocess_env
from tests.accel_tpu.models import quiet
from torchplug import MisconfigurationError
from torchplug_tpu import XLAAccelerator

pytestmark = pytest.mark.usefixtures("fake_xla")


@pytest.fixture
def four_chips(fake_chips: Callable[[int], None]) -> None:
    fake_chips(4)


@pytest.mark.usefixtures("four_chips")
@pytest.mark.parametrize(
    ("devices", "expected"),
    [(1, 1), (4, 4), (-1, 4), ("4", 4), ("-1", 4), (" 1 ", 1), ([2], [2]), ((3,), [3]), ("2,", [2]), ("0", None)],
    ids=[
        "one",
        "all",
        "minus-one",
        "all-as-text",
        "minus-one-as-text",
        "one-as-text",
        "index",
        "index-tuple",
        "index-as-text",
        "zero-refused",
    ],
)
def test_parse_devices_takes_one_all_or_an_index(devices: Any, expected: Any) -> None:
    if expected is None:
        with pytest.raises(ValueError, match=r"devices='0' is not valid with accelerator='tpu'"):
            XLAAccelerator.parse_devices(devices)
    else:
        assert XLAAccelerator.parse_devices(devices) == expected


@pytest.mark.usefixtures("four_chips")
@pytest.mark.parametrize(
    ("devices", "error", "message"),
    [
        (
            2,
            ValueError,
            r"devices=2 is not valid with accelerator='tpu': XLA trains on one device or on all 4 devices "
            r"of this host: give devices=1, devices=4 \(or -1, 'auto'\) for all, or devices=\[i\] for "
            r"device i \(0 to 3\)\.",
        ),
        ([0, 1], ValueError, r"devices=\[0, 1\] is not valid"),
        ([4], ValueError, r"devices=\[4\] selects XLA device 4, but this host has 4 \(ids 0 to 3\)"),
        ("0,1", ValueError, r"devices='0,1' is not valid"),
        ("two", ValueError, r"devices='two' is not valid"),
        ([True], ValueError, r"devices=\[True\] is not valid"),
        (True, TypeError, r"devices=True is not valid with accelerator='tpu'"),
        (1.0, TypeError, r"devices=1.0 is not valid"),
    ],
    ids=[
        "two-of-four",
        "two-indices",
        "index-out-of-range",
        "two-indices-as-text",
        "words",
        "bool-index",
        "bool",
        "float",
    ],
)
def test_parse_devices_errors_quote_the_value_and_list_the_choices(devices: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        XLAAccelerator.parse_devices(devices)


@pytest.mark.usefixtures("four_chips")
def test_trainer_turns_a_bad_devices_value_into_a_misconfiguration(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"devices=3 is not valid with accelerator='tpu'"):
        torchplug.Trainer(accelerator="tpu", devices=3, **quiet(tmp_path))


def test_parallel_devices_are_xla_devices() -> None:
    assert XLAAccelerator.get_parallel_devices(4) == [torch.device("xla", i) for i in range(4)]
    assert XLAAccelerator.get_parallel_devices([2]) == [torch.device("xla", 2)]


def test_devices_are_counted_without_starting_the_runtime(
    fake_state: ModuleType, fake_chips: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_chips(4)
    monkeypatch.setenv("FAKE_XLA_CORES_PER_CHIP", "2")  # TPU v2/v3: two cores per chip
    assert XLAAccelerator.auto_device_count() == 8
    assert XLAAccelerator.is_available() is True
    assert fake_state.started is False  # xmp.spawn would refuse to start the processes otherwise


def test_no_chip_means_unavailable_with_a_hint(fake_chips: Callable[[int], None]) -> None:
    fake_chips(0)
    assert XLAAccelerator.is_available() is False
    assert XLAAccelerator.unavailable_reason() == (
        "torch_xla found no XLA device on this machine (PJRT_DEVICE='TPU'). Hint: run on a TPU VM, or set "
        "PJRT_DEVICE=CPU to try XLA on the CPU."
    )
    with pytest.raises(torchplug.PluginUnavailableError, match="torch_xla found no XLA device"):
        torchplug.Trainer(accelerator="tpu")


def test_other_pjrt_devices_are_counted_by_the_runtime(
    monkeypatch: pytest.MonkeyPatch, fake_chips: Callable[[int], None]
) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    fake_chips(3)
    assert XLAAccelerator.auto_device_count() == 3


def test_a_broken_torch_xla_is_reported_not_raised(fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch_xla._internal.tpu as tpu

    def broken() -> int:
        raise OSError("cannot read /sys/bus/pci")

    monkeypatch.setattr(tpu, "num_available_chips", broken)
    assert (
        XLAAccelerator.unavailable_reason() == "torch_xla could not count the XLA devices: OSError: cannot read "
        "/sys/bus/pci"
    )


def test_auto_prefers_the_tpu_when_it_is_available(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(**quiet(tmp_path))
    assert isinstance(trainer.accelerator, XLAAccelerator)
    assert "highest priority available (100)" in trainer.describe()


def test_answers_to_the_core() -> None:
    accelerator = XLAAccelerator()
    assert (accelerator.device_type, accelerator.autocast_device_type, accelerator.process_group_backend) == (
        "xla",
        "xla",
        "xla",
    )
    assert accelerator.default_strategy(1, 1, False) == "single_xla"
    assert accelerator.default_strategy(4, 1, True) == "xla"  # also in notebooks: the XLA launcher forks
    assert accelerator.supported_precisions == {"xla-32-true", "xla-bf16-true", "xla-16-true", "xla-bf16-mixed"}


def test_default_checkpoint_io_is_io_xla_when_installed(tmp_path: Path) -> None:
    assert XLAAccelerator().default_checkpoint_io == "xla"
    trainer = torchplug.Trainer(accelerator="tpu", **quiet(tmp_path))
    assert type(trainer.checkpoint_io).__name__ == "XLACheckpointIO"
    assert "checkpoint_io        xla  (default of XLAAccelerator)" in trainer.describe()


def test_default_checkpoint_io_is_the_cores_without_io_xla() -> None:
    code = (
        "import torchplug\nfrom torchplug_tpu import XLAAccelerator\n"
        "trainer = torchplug.Trainer(accelerator='tpu', logger=False)\n"
        "print(XLAAccelerator().default_checkpoint_io, type(trainer.checkpoint_io).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=subprocess_env(fake=True, TORCHPLUG_BLOCK_PLUGINS="io-xla"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["xla", "TorchCheckpointIO"]  # preferred, not installed: the core's IO
    assert (  # and said so
        "Checkpoints are written with the core's 'torch' checkpoint IO: XLAAccelerator prefers the checkpoint IO "
        "'xla', which is not installed. Hint: pip install io-xla"
    ) in result.stderr


def test_device_stats_in_bytes() -> None:
    stats = XLAAccelerator().get_device_stats(torch.device("xla", 0))
    assert stats == {"memory_used_bytes": 3 * 2**20, "memory_limit_bytes": 16 * 2**30, "memory_peak_bytes": 5 * 2**20}


def test_device_stats_of_older_torch_xla(fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch_xla.core.xla_model as xm

    monkeypatch.setattr(xm, "get_memory_info", lambda device=None: {"kb_free": 1024, "kb_total": 4096})
    assert XLAAccelerator().get_device_stats(torch.device("xla", 0)) == {
        "memory_used_bytes": 3 * 2**20,
        "memory_limit_bytes": 4 * 2**20,
    }


def test_synchronize_runs_the_lazy_graph_and_waits_for_the_device(fake_state: ModuleType) -> None:
    syncs, waits = fake_state.syncs, fake_state.waits
    XLAAccelerator().synchronize(torch.device("xla", 0))  # what ThroughputMonitor asks before reading the clock
    assert (fake_state.syncs - syncs, fake_state.waits - waits) == (1, 1)


def test_rng_state_round_trip(fake_state: ModuleType) -> None:
    accelerator = XLAAccelerator()
    state = accelerator.get_rng_state()
    accelerator.set_rng_state(state + 5)
    assert accelerator.get_rng_state() == state + 5
    accelerator.set_rng_state(None)  # a checkpoint saved on another accelerator
    assert fake_state.rng_seed == state + 5


def test_a_torch_xla_that_fails_to_import_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_xla.runtime", None)  # as a build for another torch fails
    reason = XLAAccelerator.unavailable_reason()
    assert reason is not None
    assert reason.startswith("torch_xla is installed, but torch_xla.runtime cannot be imported: ")
    assert reason.endswith(
        "Hint: pip install torch_xla (see https://github.com/pytorch/xla for the build matching your torch)"
    )
