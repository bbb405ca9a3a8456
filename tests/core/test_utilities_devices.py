"""The ``devices=`` grammar (parse_device_ids) and the core's refusal of more devices than an accelerator has."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest
import torch

from torchplug import MisconfigurationError
from torchplug.accelerators import parse_device_ids
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.trainer.connector import resolve


@pytest.mark.parametrize(
    ("devices", "ids"),
    [
        (2, [0, 1]),
        ("3", [0, 1, 2]),
        (-1, [0, 1, 2, 3]),
        ("-1", [0, 1, 2, 3]),
        ("0,2", [0, 2]),
        (" 1, 3 ", [1, 3]),
        ("1,", [1]),
        ([3, 0], [3, 0]),
        ((2,), [2]),
    ],
    ids=["count", "count-text", "all", "all-text", "ids-text", "ids-text-spaces", "one-id-text", "list", "tuple"],
)
def test_the_grammar_against_four_devices(devices: Any, ids: list[int]) -> None:
    assert parse_device_ids(devices, available=4) == ids


@pytest.mark.parametrize(
    ("devices", "error", "message"),
    [
        (5, ValueError, "devices=5 is not valid with accelerator='xpu': it asks for 5 devices, but there are 4."),
        ([0, 4], ValueError, "devices=[0, 4] is not valid with accelerator='xpu': there is no device 4; there are 4"),
        ("0,0", ValueError, "devices='0,0' is not valid with accelerator='xpu': device 0 is listed twice."),
        ([-1], ValueError, "devices=[-1] is not valid with accelerator='xpu': there is no device -1"),
        (-2, ValueError, "devices=-2 is not valid with accelerator='xpu': give a number of devices from 1 to 4"),
        ("two", ValueError, "devices='two' is not valid with accelerator='xpu': give a number of devices from 1 to 4"),
        (True, TypeError, "devices=True is not valid with accelerator='xpu'"),
        (2.0, TypeError, "devices=2.0 is not valid with accelerator='xpu'"),
        ([], ValueError, "devices=[] is not valid with accelerator='xpu': it selects no device."),
    ],
    ids=["too-many", "id-beyond", "duplicate", "negative-id", "negative-count", "words", "bool", "float", "empty"],
)
def test_bad_values_quote_the_value_and_the_count(devices: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        parse_device_ids(devices, available=4, accelerator="accelerator='xpu'")


def test_every_device_of_none_is_an_error() -> None:
    with pytest.raises(ValueError, match="it asks for every device, but there is none on this machine"):
        parse_device_ids(-1, available=0)


def test_processes_without_a_fixed_number_take_counts_only() -> None:
    assert parse_device_ids(64, available=None) == list(range(64))
    for devices in (-1, "0,2", [0]):
        with pytest.raises(ValueError, match="give the number of processes, a positive int such as devices=2"):
            parse_device_ids(devices, available=None, accelerator="the CPU accelerator")


class _Lenient(CPUAccelerator):
    """A vendor accelerator with two devices whose parse_devices checks nothing."""

    devices_are_processes: ClassVar[bool] = False

    @staticmethod
    def auto_device_count() -> int:
        return 2

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return [int(i) for i in devices] if isinstance(devices, list) else int(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * (len(devices) if isinstance(devices, list) else int(devices))


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (4, "devices=4 asks for 4 devices, but _Lenient.auto_device_count() reports 2 on this machine. Hint:"),
        ([0, 3], "devices=[0, 3] asks for device 3, but _Lenient.auto_device_count() reports 2 on this machine."),
    ],
)
def test_the_core_refuses_more_devices_than_the_accelerator_reports(devices: Any, message: str) -> None:
    with pytest.raises(MisconfigurationError, match=re.escape(message)):
        resolve(accelerator=_Lenient(), devices=devices, strategy="ddp_spawn")


def test_the_cpu_runs_as_many_processes_as_asked() -> None:
    resolution = resolve(accelerator="cpu", devices=4, strategy="ddp_spawn")
    assert resolution.num_devices == 4
