"""Plugins that fail (import error, hook error, older core, misspelt hook) beside a working one.

Each failure is recorded with its state and its error, never stops the others, and makes
``core plugins list`` exit 1 (as its ``--help`` says), with or without ``--check``;
``TORCHPLUG_STRICT_PLUGINS=1`` makes it raise in Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import PluginSet, Scenario, Wheel, WheelBuilder

pytestmark = pytest.mark.slow

#: Every failing fixture, with the state it must end in and how the reason recorded for it starts.
FAILURES = {
    "vendor-importerror": ("broken", "ModuleNotFoundError: No module named 'vendor_importerror_missing_sdk'"),
    "vendor-hookerror": ("broken", "RuntimeError: npu driver handshake failed (error 0x2a)"),
    "vendor-oldcore": (
        "incompatible",
        "vendor-oldcore 0.0.9 requires core<0.1, but core {core} is installed. "
        "Hint: install a release of vendor-oldcore that supports core {core}, "
        "or a core that matches core<0.1",
    ),
    "vendor-typo": (
        "broken",
        "PluginError: unknown hook 'torchplug_register_accelerator'. "
        "Did you mean 'torchplug_register_accelerators'? Known hooks: "
        "torchplug_checkpoint_reader, torchplug_environment_report, torchplug_register_accelerators, ",
    ),
}

STRICT = {"TORCHPLUG_STRICT_PLUGINS": "1"}


@pytest.fixture(params=list(FAILURES))
def failing(request: pytest.FixtureRequest) -> str:
    """The distribution name of one failing fixture."""
    return str(request.param)


@pytest.fixture
def pair(plugin_set: PluginSet, failing: str) -> Scenario:
    """vendor-xpu and one failing fixture: that fixture alone decides the exit codes."""
    return plugin_set("vendor-xpu", failing)


def test_every_plugin_ends_in_its_state(zoo: Scenario, core_wheel: Wheel) -> None:
    listing = zoo.listing(expect_exit=1)
    assert listing.states() == {
        "core": "ok",
        "vendor-hookerror": "broken",
        "vendor-importerror": "broken",
        "vendor-oldcore": "incompatible",
        "vendor-typo": "broken",
        "vendor-xpu": "ok",
    }
    for distribution, (state, reason) in FAILURES.items():
        record = listing.plugin(distribution)
        assert record["state"] == state
        assert record["reason"].startswith(reason.format(core=core_wheel.version))
    statuses = {
        (e["name"], e["provider"]["distribution"]): e["status"]
        for e in listing.data["entries"]
        if not e["provider"]["builtin"]
    }
    assert statuses == {("npu", "vendor-hookerror"): "broken", ("xpu", "vendor-xpu"): "ok"}
    assert listing.entry("cpu")["status"] == "ok"


def test_the_table_lists_the_plugins_not_loaded(zoo: Scenario, core_wheel: Wheel) -> None:
    result = zoo.core("plugins", "list")
    assert result.returncode == 1, str(result)
    not_loaded = result.stdout.split("\nPlugins not loaded:\n", 1)[1]
    for distribution, (state, reason) in FAILURES.items():
        assert f" {state} " in next(line for line in not_loaded.splitlines() if distribution in line)
        assert f"    -> {reason.format(core=core_wheel.version)}" in not_loaded
    assert "vendor-xpu" not in not_loaded


@pytest.mark.parametrize(
    ("args", "env", "exit_code"),
    [
        ([], {}, 1),
        (["--json"], {}, 1),
        (["--check", "--kind", "accelerator"], {}, 1),
        ([], STRICT, 1),
        (["--json"], STRICT, 1),
    ],
    ids=["list", "json", "check", "strict", "strict-json"],
)
def test_exit_codes(pair: Scenario, args: list[str], env: dict[str, str], exit_code: int) -> None:
    # --check runs with --kind accelerator, so that the built-in strategies and the rest cannot decide its exit code.
    result = pair.core("plugins", "list", *args, env=env)
    assert result.returncode == exit_code, str(result)
    assert "xpu" in result.stdout  # the working plugin is listed whatever the exit code


def test_a_failure_never_stops_the_others(pair: Scenario, failing: str) -> None:
    listing = pair.listing(expect_exit=1)
    assert listing.states() == {"core": "ok", "vendor-xpu": "ok", failing: FAILURES[failing][0]}
    assert listing.entry("xpu")["status"] == "ok"


def test_strict_mode_raises_on_first_use_in_python(pair: Scenario, failing: str, core_wheel: Wheel) -> None:
    error = pair.python_json(
        """
import json, torchplug
try:
    torchplug.AcceleratorRegistry.get("cpu")
except torchplug.PluginLoadError as exc:
    print(json.dumps({"message": str(exc), "cause": repr(exc.__cause__)}))
""",
        env=STRICT,
    )
    state, reason = FAILURES[failing]
    assert error["message"].startswith("1 plugin(s) failed to load and TORCHPLUG_STRICT_PLUGINS=1:\n")
    assert f"({failing} " in error["message"]
    assert f": {state}: {reason.format(core=core_wheel.version)}" in error["message"]
    assert error["message"].endswith("or unset TORCHPLUG_STRICT_PLUGINS.")


def test_an_import_error_is_raised_for_its_entry_point_name(zoo: Scenario) -> None:
    error = zoo.python_json("""
import json, torchplug
try:
    torchplug.AcceleratorRegistry.get("importerror")
except torchplug.UnknownPluginError as exc:
    print(json.dumps({"message": str(exc), "cause": repr(exc.__cause__)}))
""")
    assert "plugin 'importerror' from vendor-importerror 0.3.0 is broken" in error["message"]
    assert error["cause"] == "ModuleNotFoundError(\"No module named 'vendor_importerror_missing_sdk'\")"


def test_a_hook_error_is_raised_by_the_names_it_registered(zoo: Scenario, wheel_builder: WheelBuilder) -> None:
    version = wheel_builder("vendor-hookerror").version
    error = zoo.python_json("""
import json, torchplug
try:
    torchplug.AcceleratorRegistry.get("npu")
except torchplug.BrokenPluginError as exc:
    print(json.dumps({"message": str(exc), "cause": repr(exc.__cause__), "import_error": isinstance(exc, ImportError)}))
""")
    assert error == {
        "message": f"Accelerator 'npu' from vendor-hookerror {version} is broken: RuntimeError: npu driver handshake "
        "failed (error 0x2a). Hint: reinstall or upgrade vendor-hookerror, or block it with "
        "TORCHPLUG_BLOCK_PLUGINS=vendor-hookerror.",
        "cause": "RuntimeError('npu driver handshake failed (error 0x2a)')",
        "import_error": True,
    }


def test_show_a_broken_name_exits_1_with_its_traceback(zoo: Scenario, wheel_builder: WheelBuilder) -> None:
    version = wheel_builder("vendor-hookerror").version
    result = zoo.core("plugins", "show", "npu")
    assert result.returncode == 1, str(result)
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "status broken (RuntimeError: npu driver handshake failed (error 0x2a))" in lines
    assert f"plugin 'npu' from vendor-hookerror {version}: broken" in lines
    assert "| raise RuntimeError(MESSAGE)" in lines  # the traceback reaches into the plugin's hook, behind the gutter
    assert "| RuntimeError: npu driver handshake failed (error 0x2a)" in lines


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"TORCHPLUG_PLUGINS": "vendor-oldcore"},
        {"TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD": "1", "TORCHPLUG_PLUGINS": "vendor-oldcore,oldcore"},
    ],
    ids=["autoload", "requested", "requested-autoload-off"],
)
def test_a_plugin_for_another_core_is_never_imported(zoo: Scenario, core_wheel: Wheel, env: dict[str, str]) -> None:
    # Its module raises on import: had it been imported, its state would be broken, not incompatible.
    loaded = zoo.python_json(
        """
import json, sys, torchplug
host = torchplug.plugin_host()
host.ensure_loaded()
record = next(r for r in host.records if r.distribution == "vendor-oldcore")
print(json.dumps({"state": record.state, "reason": record.reason, "requires_core": record.requires_core,
                  "modules": sorted(m for m in sys.modules if m.startswith("vendor_oldcore"))}))
""",
        env=env,
    )
    assert loaded["state"] == "incompatible"
    assert "requires core<0.1" in loaded["reason"]
    assert f"but core {core_wheel.version} is installed" in loaded["reason"]
    assert loaded["requires_core"] == "<0.1"
    assert loaded["modules"] == []


def test_a_misspelt_hook_registers_nothing(zoo: Scenario) -> None:
    listing = zoo.listing(expect_exit=1)
    assert listing.entries("typo") == []
    record = listing.plugin("vendor-typo")
    assert record["state"] == "broken"
    assert "unknown hook 'torchplug_register_accelerator'" in record["reason"]
    assert "Did you mean 'torchplug_register_accelerators'?" in record["reason"]
