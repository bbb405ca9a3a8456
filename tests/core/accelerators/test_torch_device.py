"""The generic ``torch`` accelerator on a machine where torch reports no accelerator (this CPU build).

Its behaviour on a real device is tested on ``tpdev`` in tests/torch_device.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
import torch

import torchplug
from torchplug.accelerators.torch_device import TorchDeviceAccelerator, _parse_ids, torch_device_accelerator

NO_ACCELERATOR = "torch reports no accelerator (torch.accelerator.current_accelerator() is None)"

pytestmark = pytest.mark.skipif(
    torch.accelerator.current_accelerator() is not None, reason="torch reports an accelerator on this machine"
)


def test_with_nothing_to_serve_it_is_unavailable_and_says_why() -> None:
    assert TorchDeviceAccelerator.is_available() is False
    reason = TorchDeviceAccelerator.unavailable_reason()
    assert reason is not None and reason.startswith(NO_ACCELERATOR)
    assert "Hint: install your device's torch backend package" in reason
    assert TorchDeviceAccelerator.auto_device_count() == 0


def test_asking_for_it_raises_the_reason() -> None:
    with pytest.raises(torchplug.PluginUnavailableError, match=r"Accelerator 'torch' from core .* torch reports no"):
        torchplug.Trainer(accelerator="torch")
    with pytest.raises(torchplug.PluginUnavailableError, match="nothing to serve: torch reports no accelerator"):
        TorchDeviceAccelerator()


def test_a_device_type_name_without_that_device_is_an_unknown_name() -> None:
    with pytest.raises(torchplug.UnknownPluginError) as info:
        torchplug.Trainer(accelerator="tpdev")
    message = str(info.value)
    assert message.startswith("Unknown accelerator 'tpdev'.")
    assert message.endswith("Nor is 'tpdev' a torch device type served here (torch reports no accelerator).")


def test_a_bound_class_asks_torch_for_autocast_and_the_process_group_backend() -> None:
    meta = torch_device_accelerator("meta")
    assert meta is torch_device_accelerator("meta")  # asked once
    assert (meta.device_type, meta.name, meta.auto_priority) == ("meta", "meta", 10)
    assert meta.autocast_device_type is None  # torch.amp.is_autocast_available("meta") is False
    assert meta.torch_process_group_backend is None  # torch registers none for meta
    with pytest.raises(torchplug.MisconfigurationError, match="torch registers no process-group backend for device"):
        meta().default_strategy(2, 1, False)
    assert meta().default_strategy(1, 1, False) == "single_device"
    with pytest.raises(ValueError, match="serves 'meta', not device_type='cpu'"):
        meta("cpu")


def test_an_instance_pickles_to_the_class_of_its_device_type() -> None:
    accelerator = torch_device_accelerator("meta")()
    copy = pickle.loads(pickle.dumps(accelerator))
    assert type(copy) is type(accelerator) and repr(copy) == "TorchDeviceAccelerator(device_type='meta')"


@pytest.mark.parametrize(
    ("devices", "ids"),
    [
        (1, [0]),
        (3, [0, 1, 2]),
        (-1, [0, 1, 2, 3]),
        ("2", [0, 1]),
        ("-1", [0, 1, 2, 3]),
        ([2, 0], [2, 0]),
        ("1,3", [1, 3]),
        ("[1]", [1]),
        ("1,", [1]),
        ((3,), [3]),
    ],
)
def test_devices_are_a_count_all_or_ids(devices: object, ids: list[int]) -> None:
    assert _parse_ids(devices, 4, "tpdev") == ids


@pytest.mark.parametrize("devices", [0, 5, -2, [], [4], [0, 0], "x", "1,a", True, 1.5, None])
def test_bad_devices_quote_the_value_and_what_exists(devices: object) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        _parse_ids(devices, 4, "tpdev")
    assert str(info.value).startswith(f"devices={devices!r} is not valid for the 'tpdev' devices torch reports")
    assert "(4 device(s), ids 0-3)" in str(info.value)


def test_listing_shows_it_without_asking_torch_and_check_asks() -> None:
    def listed(*extra: str) -> dict[str, object]:
        result = subprocess.run(
            [sys.executable, "-m", "torchplug", "plugins", "list", "--kind", "accelerator", "--json", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return {e["name"]: e for e in json.loads(result.stdout)["entries"]}["torch"]

    plain, checked = listed(), listed("--check")
    assert (plain["status"], plain["reason"]) == ("ok", None)  # probed on use: torch is installed
    assert plain["target"] == "torchplug.accelerators.torch_device:TorchDeviceAccelerator"
    assert checked["status"] == "unavailable"
    assert str(checked["reason"]).startswith(NO_ACCELERATOR)
