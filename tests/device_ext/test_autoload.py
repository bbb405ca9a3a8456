"""Installing the wheel is all a user does: ``import torch`` alone brings the ``tpdev`` device.

Each test starts a fresh interpreter with the wheel on its path, as a user's process would be.
"""

from __future__ import annotations

import pytest

from tests.device_ext_support import DeviceSite

REPORT = """
    import json, sys
    import torch
    report = {"imported": "torchplug_testdevice" in sys.modules, "backend": torch._C._get_privateuse1_backend_name()}
    accelerator = torch.accelerator.current_accelerator()
    report["accelerator"] = None if accelerator is None else accelerator.type
    if accelerator is not None:
        report["count"] = torch.accelerator.device_count()
        report["available"] = torch.accelerator.is_available()
        report["module"] = torch.get_device_module("tpdev").__name__
        report["tensor"] = str(torch.ones(2, device="tpdev").device)
    print(json.dumps(report))
"""


def test_import_torch_alone_brings_the_device(testdevice_site: DeviceSite) -> None:
    report = testdevice_site.python_json(REPORT)

    assert report == {
        "imported": True,
        "backend": "tpdev",
        "accelerator": "tpdev",
        "count": 2,
        "available": True,
        "module": "torchplug_testdevice.device",
        "tensor": "tpdev:0",
    }


@pytest.mark.parametrize("count", [1, 3])
def test_tpdev_device_count_sets_the_number_of_devices(testdevice_site: DeviceSite, count: int) -> None:
    report = testdevice_site.python_json(REPORT, env={"TPDEV_DEVICE_COUNT": str(count)})

    assert report["count"] == count


@pytest.mark.parametrize("value", ["zero", "0", "17", "2.5"])
def test_a_bad_device_count_stops_import_torch_and_names_the_variable(testdevice_site: DeviceSite, value: str) -> None:
    result = testdevice_site.run("-c", "import torch", env={"TPDEV_DEVICE_COUNT": value})

    assert result.returncode != 0
    assert f"TPDEV_DEVICE_COUNT='{value}' is not a device count" in result.stderr
    assert "integer from 1 to 16" in result.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr  # torch's own hint, around our error


def test_with_autoload_off_the_device_comes_with_importing_the_package(testdevice_site: DeviceSite) -> None:
    report = testdevice_site.python_json(
        """
        import json
        import torch
        before = torch.accelerator.current_accelerator()
        try:
            torch.device("tpdev")
            known = True
        except RuntimeError:
            known = False
        import torchplug_testdevice
        print(json.dumps({"before": before and before.type, "known": known,
                          "after": torch.accelerator.current_accelerator().type}))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )

    assert report == {"before": None, "known": False, "after": "tpdev"}


def test_loading_twice_is_harmless(testdevice_site: DeviceSite) -> None:
    report = testdevice_site.python_json(
        """
        import json
        import torch, torchplug_testdevice
        torchplug_testdevice.load()
        print(json.dumps(torch.accelerator.device_count()))
        """
    )

    assert report == 2
