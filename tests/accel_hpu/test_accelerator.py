"""The ``hpu`` accelerator against the fake habana_frameworks: devices, availability, stats and the core's questions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_hpu.models import quiet
from torchplug import MisconfigurationError, PluginUnavailableError
from torchplug_hpu import HPUAccelerator

pytestmark = pytest.mark.usefixtures("fake_habana")


@pytest.mark.parametrize(
    ("devices", "expected"),
    [(1, 1), (8, 8), ("2", 2), (" 4 ", 4), (-1, 8), ("-1", 8)],
    ids=["one", "all", "two-as-text", "four-as-text", "minus-one", "minus-one-as-text"],
)
def test_devices_are_a_number_of_hpus(devices: Any, expected: int) -> None:
    assert HPUAccelerator.parse_devices(devices) == expected


@pytest.mark.parametrize(
    ("devices", "error", "message"),
    [
        (
            16,
            ValueError,
            r"devices=16 asks for 16 HPUs, but this machine has 8\. Hint: use devices=8 \(or -1\), or "
            r"fewer\.",
        ),
        (
            0,
            ValueError,
            r"devices=0 is not valid with accelerator='hpu': give the number of HPUs \(one process each\), "
            r"a positive int such as devices=8, or -1 for every HPU\.",
        ),
        (-3, ValueError, r"devices=-3 is not valid"),
        ("two", ValueError, r"devices='two' is not valid"),
        (
            [0, 1],
            TypeError,
            r"devices=\[0, 1\] is not valid with accelerator='hpu'.* Hint: HPUs are counted, not "
            r"chosen by id; pick cards with HABANA_VISIBLE_MODULES=0,1\.",
        ),
        (True, TypeError, r"devices=True is not valid"),
        (1.0, TypeError, r"devices=1.0 is not valid"),
    ],
    ids=["more-than-the-machine", "zero", "minus-three", "words", "ids", "bool", "float"],
)
def test_device_errors_quote_the_value_and_say_what_is_allowed(devices: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        HPUAccelerator.parse_devices(devices)


def test_the_trainer_turns_a_bad_devices_value_into_a_misconfiguration(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"devices=16 asks for 16 HPUs"):
        torchplug.Trainer(accelerator="hpu", **quiet(tmp_path, devices=16))


def test_every_process_gets_the_next_free_hpu() -> None:
    assert HPUAccelerator.get_parallel_devices(2) == [torch.device("hpu"), torch.device("hpu")]


def test_a_machine_without_hpus_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HPU_COUNT", "0")
    assert HPUAccelerator.is_available() is False
    assert "habana_frameworks finds no HPU on this machine" in str(HPUAccelerator.unavailable_reason())
    with pytest.raises(PluginUnavailableError, match=r"cannot run on this machine: habana_frameworks finds no HPU"):
        torchplug.Trainer(accelerator="hpu")


def test_the_answers_the_core_asks_for() -> None:
    accelerator = HPUAccelerator()
    assert (accelerator.device_type, accelerator.autocast_device_type) == ("hpu", "hpu")
    assert accelerator.process_group_backend == "hccl"
    assert accelerator.default_strategy(1, 1, False) == "hpu_single"
    assert accelerator.default_strategy(8, 1, False) == accelerator.default_strategy(1, 2, False) == "hpu_parallel"
    assert accelerator.supported_precisions == {"32-true", "bf16-true", "hpu-bf16-mixed", "hpu-fp8"}


def test_setup_device_refuses_another_device() -> None:
    HPUAccelerator().setup_device(torch.device("hpu"))
    with pytest.raises(ValueError, match=r"The HPU accelerator cannot run on device cpu; expected an 'hpu' device\."):
        HPUAccelerator().setup_device(torch.device("cpu"))


def test_synchronize_runs_the_lazy_graph_and_waits_for_the_hpu() -> None:
    from habana_frameworks.torch import _fake

    steps, waits = _fake.mark_steps, _fake.synchronizations
    HPUAccelerator().synchronize(torch.device("hpu"))  # what ThroughputMonitor asks before reading the clock
    assert (_fake.mark_steps - steps, _fake.synchronizations - waits) == (1, 1)


def test_device_stats_come_from_the_runtime_in_bytes() -> None:
    stats = HPUAccelerator().get_device_stats(torch.device("hpu"))
    gib = 1 << 30
    assert stats == {
        "memory_used_bytes": 3 * gib,
        "memory_peak_bytes": 5 * gib,
        "memory_limit_bytes": 94 * gib,
        "allocations": 120,
        "frees": 100,
        "active_allocations": 20,
        "largest_allocation_bytes": gib,
    }


def test_the_hpu_random_state_round_trips() -> None:
    import habana_frameworks.torch.hpu as hpu

    accelerator = HPUAccelerator()
    state = accelerator.get_rng_state()
    first = hpu.random_draw()
    accelerator.set_rng_state(state)
    assert hpu.random_draw() == first


def test_auto_picks_the_hpu_over_the_cpu(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="auto", **quiet(tmp_path))
    assert type(trainer.accelerator).__name__ == "HPUAccelerator"
    assert "highest priority available (80)" in trainer.describe()


@pytest.mark.parametrize(("devices", "strategy"), [(1, "HPUSingleStrategy"), (2, "HPUParallelStrategy")])
def test_the_strategy_follows_the_device_count(tmp_path: Path, devices: int, strategy: str) -> None:
    trainer = torchplug.Trainer(accelerator="hpu", **quiet(tmp_path, devices=devices))
    assert type(trainer.strategy).__name__ == strategy
    assert trainer.strategy.root_device == torch.device("hpu")
