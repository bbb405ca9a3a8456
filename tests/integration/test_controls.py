"""The environment variables that control discovery, against real installed plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import Scenario

pytestmark = pytest.mark.slow

AUTOLOAD_OFF = {"TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD": "1"}

#: Prints, as JSON, every plugin's state, the names plugins registered, their hooks, and the vendor modules imported.
REPORT = """
import json, sys, torchplug
host = torchplug.plugin_host()
host.ensure_loaded()
print(json.dumps({
    "states": {r.distribution or r.name: r.state for r in host.records},
    "names": sorted(e.name for kind in ("accelerator", "strategy", "precision", "checkpoint_io", "cluster_environment")
                    for e in host.registry(kind).entries() if not e.provider.builtin),
    "hook_plugins": [i.plugin_name for i in host.plugin_manager.hook.torchplug_register_accelerators.get_hookimpls()],
    "modules": sorted({m.split(".")[0] for m in sys.modules if m.startswith("vendor_")}),
}))
"""


def test_autoload_off_loads_only_the_builtins(zoo: Scenario) -> None:
    listing = zoo.listing(env=AUTOLOAD_OFF)
    assert listing.data["settings"]["autoload"] is False
    assert listing.states() == {
        "core": "ok",
        "vendor-hookerror": "disabled",
        "vendor-importerror": "disabled",
        "vendor-oldcore": "disabled",
        "vendor-typo": "disabled",
        "vendor-xpu": "disabled",
    }
    assert listing.plugin("vendor-xpu")["reason"] == (
        "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD=1 and not named in TORCHPLUG_PLUGINS"
    )
    assert all(e["provider"]["builtin"] for e in listing.data["entries"])
    assert listing.entry("cpu")["status"] == "ok"
    report = zoo.python_json(REPORT, env=AUTOLOAD_OFF)
    assert (report["names"], report["modules"]) == ([], [])


@pytest.mark.parametrize(
    "requested",
    ["vendor-xpu", "Vendor_XPU", "xpu"],
    ids=["by-distribution", "by-distribution-other-spelling", "by-entry-point"],
)
def test_plugins_named_in_torchplug_plugins_load_with_autoload_off(zoo: Scenario, requested: str) -> None:
    env = {**AUTOLOAD_OFF, "TORCHPLUG_PLUGINS": requested}
    listing = zoo.listing(env=env)
    assert listing.data["settings"]["requested"] == [requested]
    assert listing.states() == {
        "core": "ok",
        "vendor-hookerror": "disabled",
        "vendor-importerror": "disabled",
        "vendor-oldcore": "disabled",
        "vendor-typo": "disabled",
        "vendor-xpu": "ok",
    }
    assert listing.entry("xpu")["status"] == "ok"
    report = zoo.python_json(REPORT, env=env)
    assert report["modules"] == ["vendor_xpu"]
    assert report["names"] == ["xpu"]


def test_blocking_by_entry_point_name(zoo: Scenario) -> None:
    listing = zoo.listing(env={"TORCHPLUG_BLOCK_PLUGINS": "npu, typo ,importerror"}, expect_exit=1)  # oldcore
    assert listing.data["settings"]["blocked"] == ["npu", "typo", "importerror"]
    assert listing.states() == {
        "core": "ok",
        "vendor-hookerror": "blocked",
        "vendor-importerror": "blocked",
        "vendor-oldcore": "incompatible",
        "vendor-typo": "blocked",
        "vendor-xpu": "ok",
    }
    assert zoo.python_json(REPORT, env={"TORCHPLUG_BLOCK_PLUGINS": "npu,typo,importerror"})["modules"] == ["vendor_xpu"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD": "maybe"}, "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD='maybe' is not a boolean."),
        ({"TORCHPLUG_STRICT_PLUGINS": "sure"}, "TORCHPLUG_STRICT_PLUGINS='sure' is not a boolean."),
        ({"TORCHPLUG_PREFER": "xpu"}, "TORCHPLUG_PREFER has the item 'xpu', which is not NAME=PROVIDER."),
    ],
    ids=["autoload", "strict", "prefer"],
)
def test_a_bad_variable_is_a_usage_error(xpu: Scenario, env: dict[str, str], message: str) -> None:
    result = xpu.core("plugins", "list", env=env)
    assert result.returncode == 2, str(result)
    assert result.stderr.startswith(f"core: error: {message} Hint: ")


def test_a_plugin_module_named_in_torchplug_plugins_loads_with_autoload_off(xpu: Scenario) -> None:
    env = {**AUTOLOAD_OFF, "TORCHPLUG_PLUGINS": "vendor_xpu._plugin"}
    report = xpu.python_json(REPORT, env=env)
    # the module is the one vendor-xpu's entry point names: that entry point (with its distribution) loads
    assert report["states"] == {"core": "ok", "vendor-xpu": "ok"}
    assert "xpu" in report["names"]


def test_a_plugin_module_named_in_torchplug_plugins_is_described_by_its_distribution(xpu: Scenario) -> None:
    env = {**AUTOLOAD_OFF, "TORCHPLUG_PLUGINS": "vendor_xpu._plugin", "VENDOR_XPU_HIDE": "1"}
    error = xpu.python_json(
        """
import json, torchplug
try:
    torchplug.AcceleratorRegistry.get("xpu")
except torchplug.PluginUnavailableError as exc:
    print(json.dumps(str(exc)))
""",
        env=env,
    )
    assert error.startswith("Accelerator 'xpu' from vendor-xpu ")
    shown = xpu.core("plugins", "show", "xpu", env=env)
    assert "None None" not in shown.stdout, str(shown)


def test_naming_an_autoloaded_plugin_module_in_torchplug_plugins_is_harmless(xpu: Scenario) -> None:
    report = xpu.python_json(REPORT, env={"TORCHPLUG_PLUGINS": "vendor_xpu._plugin"})
    assert set(report["states"].values()) == {"ok"}
    assert report["hook_plugins"] == ["core:builtin", "vendor-xpu:xpu"]
