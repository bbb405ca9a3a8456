"""The ``ipu`` accelerator against the fake poptorch: devices as replicas, availability, the core's questions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_ipu.models import quiet
from torchplug import MisconfigurationError, PluginUnavailableError
from torchplug_ipu import IPUAccelerator

pytestmark = pytest.mark.usefixtures("fake_poptorch")


@pytest.mark.parametrize(
    ("devices", "expected"),
    [(1, 1), (2, 2), (4, 4), ("2", 2), (" 4 ", 4), (-1, 4), ("-1", 4)],
    ids=["one", "two", "all-four", "two-as-text", "four-as-text", "minus-one", "minus-one-as-text"],
)
def test_devices_are_a_replication_factor(devices: Any, expected: int) -> None:
    assert IPUAccelerator.parse_devices(devices) == expected


@pytest.mark.parametrize(
    ("devices", "error", "message"),
    [
        (
            3,
            ValueError,
            r"devices=3 is not valid with accelerator='ipu': give the number of replicas, one per IPU: a "
            r"power of two such as devices=1, 2, 4 or 8 \(or -1 for every IPU\)\. PopTorch picks the IPUs; "
            r"ids cannot be chosen\.",
        ),
        (
            8,
            ValueError,
            r"devices=8 asks for 8 IPUs, but PopTorch can attach 4 here\. Hint: use devices=4 \(or -1\), "
            r"or fewer\.",
        ),
        (0, ValueError, r"devices=0 is not valid"),
        (-2, ValueError, r"devices=-2 is not valid"),
        ("two", ValueError, r"devices='two' is not valid"),
        ([0, 1], TypeError, r"devices=\[0, 1\] is not valid with accelerator='ipu'.*ids cannot be chosen"),
        (True, TypeError, r"devices=True is not valid"),
        (2.0, TypeError, r"devices=2.0 is not valid"),
    ],
    ids=["not-a-power-of-two", "more-than-the-machine", "zero", "minus-two", "words", "ids", "bool", "float"],
)
def test_device_errors_quote_the_value_and_say_what_is_allowed(devices: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        IPUAccelerator.parse_devices(devices)


def test_the_trainer_turns_a_bad_devices_value_into_a_misconfiguration(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"devices=3 is not valid with accelerator='ipu'"):
        torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=3))


@pytest.mark.parametrize(("ipus", "count"), [(1, 1), (4, 4), (6, 4), (16, 16), (0, 0)])
def test_the_ipus_are_counted_in_powers_of_two(monkeypatch: pytest.MonkeyPatch, ipus: int, count: int) -> None:
    monkeypatch.setenv("FAKE_IPU_COUNT", str(ipus))
    assert IPUAccelerator.auto_device_count() == count


def test_one_device_per_replica_all_driven_by_this_process() -> None:
    assert IPUAccelerator.get_parallel_devices(2) == [torch.device("ipu", 0), torch.device("ipu", 1)]


def test_a_machine_without_ipus_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_IPU_COUNT", "0")
    assert IPUAccelerator.is_available() is False
    assert "poptorch finds no IPU on this machine" in str(IPUAccelerator.unavailable_reason())
    with pytest.raises(PluginUnavailableError, match=r"cannot run on this machine: poptorch finds no IPU"):
        torchplug.Trainer(accelerator="ipu")


def test_the_answers_the_core_asks_for() -> None:
    accelerator = IPUAccelerator()
    assert accelerator.is_available()
    assert (accelerator.device_type, accelerator.autocast_device_type) == ("ipu", None)
    assert accelerator.process_group_backend == "poptorch"
    assert {accelerator.default_strategy(n, 1, interactive) for n in (1, 4) for interactive in (False, True)} == {"ipu"}
    assert accelerator.get_device_stats(torch.device("ipu", 0)) == {}


def test_auto_picks_the_ipu_over_the_cpu(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="auto", **quiet(tmp_path))
    assert type(trainer.accelerator).__name__ == "IPUAccelerator"
    assert "highest priority available (90)" in trainer.describe()


def test_describe_shows_how_the_ipu_run_was_resolved(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=2))
    lines = {line.split()[0]: line for line in trainer.describe().splitlines()}
    assert lines["devices"].split("(")[0].split() == ["devices", "ipu:0,", "ipu:1"]
    assert lines["strategy"].split()[1] == "ipu"
    assert lines["precision"].split()[1] == "ipu-32-true"
    assert trainer.world_size == 1 and trainer.num_devices == 2
