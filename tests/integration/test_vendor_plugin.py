"""A working third-party accelerator (tests/fixtures/vendor-xpu) installed from its wheel beside the core."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import Scenario, Wheel, WheelBuilder

pytestmark = pytest.mark.slow

#: Prints, as JSON, which torch and vendor_xpu modules a ``core plugins list`` run imported.
LIST_AND_REPORT_MODULES = """
import contextlib, io, json, sys
from torchplug.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["plugins", "list"])
names = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vendor_xpu"))
print(json.dumps({"exit": code, "modules": names}))
"""


@pytest.fixture(scope="module")
def xpu_wheel(wheel_builder: WheelBuilder) -> Wheel:
    """vendor-xpu's wheel (for its version)."""
    return wheel_builder("vendor-xpu")


def test_xpu_is_listed_ok_with_its_provider(xpu: Scenario, xpu_wheel: Wheel) -> None:
    listing = xpu.listing()
    assert listing.states() == {"core": "ok", "vendor-xpu": "ok"}
    record = listing.plugin("vendor-xpu")
    assert (record["name"], record["module"], record["version"], record["requires_core"], record["reason"]) == (
        "xpu",
        "vendor_xpu._plugin",
        xpu_wheel.version,
        "<0.2,>=0.1",
        None,
    )
    entry = listing.entry("xpu")
    assert entry["provider"] == {
        "plugin": "xpu",
        "distribution": "vendor-xpu",
        "version": xpu_wheel.version,
        "builtin": False,
    }
    assert (entry["status"], entry["reason"], entry["aliases"], entry["target"]) == (
        "ok",
        None,
        ["vxpu"],
        "vendor_xpu.accelerator:XPUAccelerator",
    )

    table = xpu.core("plugins", "list").table()
    assert {
        "name": "xpu",
        "kind": "accelerator",
        "aliases": "vxpu",
        "provider": xpu_wheel.label,
        "status": "ok",
        "description": "Vendor XPU (a CPU-backed test double)",
    } in table


#: Every way to ask for vendor-xpu's accelerator: its name, its alias, and name@provider in two spellings.
XPU_NAMES = ["xpu", "vxpu", "xpu@vendor-xpu", "xpu@Vendor_XPU"]

#: For each name of NAMES, creates the accelerator and really uses it; prints what it found as JSON.
USE_ACCELERATORS = """
import json, torch, torchplug
report = {}
for name in NAMES:
    accelerator = torchplug.AcceleratorRegistry.get(name)
    devices = accelerator.get_parallel_devices(accelerator.parse_devices(2))
    accelerator.setup_device(devices[0])
    with torch.autocast(accelerator.autocast_device_type, dtype=torch.bfloat16):
        product = torch.ones(2, 2, device=devices[0]) @ torch.ones(2, 2, device=devices[0])
    accelerator.teardown()
    report[name] = {
        "class": f"{type(accelerator).__module__}:{type(accelerator).__qualname__}",
        "is_accelerator": isinstance(accelerator, torchplug.Accelerator),
        "devices": [str(d) for d in devices], "count": accelerator.auto_device_count(),
        "product": [str(product.dtype), product.sum().item()],
    }
print(json.dumps(report))
"""


def test_registry_get_returns_a_working_vendor_accelerator(xpu: Scenario) -> None:
    report = xpu.python_json(f"NAMES = {XPU_NAMES!r}\n{USE_ACCELERATORS}")
    expected = {
        "class": "vendor_xpu.accelerator:XPUAccelerator",
        "is_accelerator": True,
        "devices": ["cpu", "cpu"],
        "count": 2,
        "product": ["torch.bfloat16", 8.0],
    }
    assert report == dict.fromkeys(XPU_NAMES, expected)


def test_check_shows_it_available_with_its_device_count(xpu: Scenario) -> None:
    # --kind accelerator: the exit code then depends on the accelerators alone, not on every built-in strategy.
    check = xpu.listing("--check", "--kind", "accelerator").entry("xpu")["check"]
    assert {k: v for k, v in check.items() if k != "seconds"} == {
        "imported": True,
        "available": True,
        "device_count": 2,
        "error": None,
    }

    result = xpu.core("plugins", "list", "--check", "--kind", "accelerator")
    assert result.returncode == 0, str(result)
    row = next(r for r in result.table() if r["name"] == "xpu")
    assert (row["status"], row["devices"]) == ("ok", "2")


def test_probe_reports_hidden_devices(xpu: Scenario, xpu_wheel: Wheel) -> None:
    hidden = {"VENDOR_XPU_HIDE": "1"}
    entry = xpu.listing(env=hidden).entry("xpu")
    assert entry["status"] == "unavailable"
    assert entry["reason"] == "VENDOR_XPU_HIDE=1 hides every xpu device. Hint: unset VENDOR_XPU_HIDE"

    check = xpu.listing("--check", "--kind", "accelerator", env=hidden).entry("xpu")["check"]
    assert (check["imported"], check["available"], check["device_count"]) == (True, False, None)

    error = xpu.python_json(
        """
import json, torchplug
try:
    torchplug.AcceleratorRegistry.get("xpu")
except torchplug.PluginUnavailableError as exc:
    print(json.dumps(str(exc)))
""",
        env=hidden,
    )
    assert error == (
        f"Accelerator 'xpu' from vendor-xpu {xpu_wheel.version} is installed but cannot run on this "
        "machine: VENDOR_XPU_HIDE=1 hides every xpu device. Hint: unset VENDOR_XPU_HIDE"
    )


def _imported_by(scenario: Scenario, *args: str) -> list[str]:
    """The modules ``python -X importtime -m torchplug ARGS`` reports importing (run with the import statement)."""
    result = scenario.python("-X", "importtime", "-m", "torchplug", *args)
    assert result.returncode == 0, str(result)
    modules = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", result.stderr, re.MULTILINE)
    assert "torchplug._listing" in modules  # the report was read
    return modules


def test_listing_imports_no_torch(xpu: Scenario) -> None:
    assert [m for m in _imported_by(xpu, "plugins", "list") if m.split(".")[0] == "torch"] == []
    assert "torch" in _imported_by(xpu, "plugins", "list", "--check", "--kind", "accelerator")  # as documented


def test_listing_imports_the_plugin_module_but_not_the_accelerator_module(xpu: Scenario) -> None:
    assert xpu.python_json(LIST_AND_REPORT_MODULES) == {"exit": 0, "modules": ["vendor_xpu", "vendor_xpu._plugin"]}


def test_show_a_name(xpu: Scenario, xpu_wheel: Wheel) -> None:
    result = xpu.core("plugins", "show", "xpu")
    assert result.returncode == 0, str(result)
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    for expected in [
        "accelerator 'xpu'",
        "status ok",
        f"provider vendor-xpu {xpu_wheel.version} (plugin 'xpu')",
        "aliases vxpu",
        "class vendor_xpu.accelerator:XPUAccelerator",
        "docstring A vendor accelerator with two CPU-backed devices.",
        "devices 2",
        f"plugin 'xpu' from vendor-xpu {xpu_wheel.version}: ok",
        "module vendor_xpu._plugin",
    ]:
        assert expected in lines, str(result)


@pytest.mark.parametrize("name", XPU_NAMES[1:])
def test_show_an_alias_or_a_qualified_name(xpu: Scenario, name: str) -> None:
    shown = xpu.core("plugins", "show", name, "--json").json()
    assert [(e["name"], e["status"], e["check"]["device_count"]) for e in shown["entries"]] == [("xpu", "ok", 2)]
    assert shown["plugins"] == []  # no plugin has that name


@pytest.mark.parametrize(
    "name",
    ["xpu", "vendor-xpu", "vendor_xpu", "Vendor-XPU"],
    ids=["entry-point", "distribution", "distribution-underscore", "distribution-upper-case"],
)
def test_show_a_plugin(xpu: Scenario, xpu_wheel: Wheel, name: str) -> None:
    result = xpu.core("plugins", "show", name, "--json")
    assert result.returncode == 0, str(result)
    assert [(p["name"], p["distribution"], p["version"], p["state"]) for p in result.json()["plugins"]] == [
        ("xpu", "vendor-xpu", xpu_wheel.version, "ok")
    ]


def test_show_an_unknown_name_is_a_usage_error(xpu: Scenario) -> None:
    result = xpu.core("plugins", "show", "nosuchname")
    assert result.returncode == 2, str(result)
    assert result.stdout == ""
    assert result.stderr.startswith("core: error: no plugin or registered name 'nosuchname'. Installed names: ")
    assert "xpu" in result.stderr
    assert result.stderr.rstrip().endswith("Hint: core plugins list")
