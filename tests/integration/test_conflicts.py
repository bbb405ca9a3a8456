"""Two distributions that both register accelerator ``xpu`` (tests/fixtures/vendor-xpu-a and -b).

The conflict is visible (both listed), asking for the bare name raises, and each documented way
to pick one works: ``xpu@provider``, ``TORCHPLUG_PREFER`` and ``TORCHPLUG_BLOCK_PLUGINS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import PluginSet, Scenario

pytestmark = pytest.mark.slow

#: For each name of NAMES, the class ``get(name)`` creates or the error it raises; and the vendor modules imported.
GET = """
import json, sys, torchplug
results = {}
for name in NAMES:
    try:
        results[name] = type(torchplug.AcceleratorRegistry.get(name)).__name__
    except torchplug.PluginError as exc:
        results[name] = {"error": type(exc).__name__, "message": str(exc)}
print(json.dumps({"results": results, "modules": sorted(m for m in sys.modules if m.startswith("vendor_xpu_"))}))
"""


def get(scenario: Scenario, *names: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Ask the accelerator registry for each of ``names`` in one process (creating one imports torch: seconds)."""
    return scenario.python_json(f"NAMES = {list(names)!r}\n{GET}", env=env)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def conflict(plugin_set: PluginSet) -> Scenario:
    """The core, vendor-xpu-a 1.0.0 and vendor-xpu-b 2.0.0."""
    return plugin_set("vendor-xpu-a", "vendor-xpu-b")


def test_both_are_listed_as_a_conflict(conflict: Scenario) -> None:
    listing = conflict.listing()
    assert listing.states() == {"core": "ok", "vendor-xpu-a": "ok", "vendor-xpu-b": "ok"}
    got = [
        (e["provider"]["distribution"], e["provider"]["version"], e["status"], e["reason"])
        for e in listing.entries("xpu")
    ]
    claimed = "'xpu' is claimed by several distributions; pick with"
    assert got == [
        ("vendor-xpu-a", "1.0.0", "conflict", f"{claimed} 'xpu@vendor-xpu-a' or TORCHPLUG_PREFER=xpu=vendor-xpu-a"),
        ("vendor-xpu-b", "2.0.0", "conflict", f"{claimed} 'xpu@vendor-xpu-b' or TORCHPLUG_PREFER=xpu=vendor-xpu-b"),
    ]
    table = conflict.core("plugins", "list").table()
    assert [(r["provider"], r["status"]) for r in table if r["name"] == "xpu"] == [
        ("vendor-xpu-a==1.0.0", "conflict"),
        ("vendor-xpu-b==2.0.0", "conflict"),
    ]


def test_the_bare_name_raises_and_says_how_to_pick(conflict: Scenario) -> None:
    got = get(conflict, "xpu")
    assert got["results"]["xpu"] == {
        "error": "PluginConflictError",
        "message": "The accelerator name 'xpu' is provided by 2 distributions: vendor-xpu-a 1.0.0, vendor-xpu-b 2.0.0. "
        "Pick one: use 'xpu@vendor-xpu-a', or set TORCHPLUG_PREFER=xpu=vendor-xpu-a, "
        "or block the other with TORCHPLUG_BLOCK_PLUGINS=vendor-xpu-b.",
    }
    assert got["modules"] == ["vendor_xpu_a", "vendor_xpu_a._plugin", "vendor_xpu_b", "vendor_xpu_b._plugin"]


def test_name_at_provider_picks_one(conflict: Scenario) -> None:
    assert get(conflict, "xpu@vendor-xpu-a", "xpu@vendor-xpu-b", "xpu@Vendor_XPU_B")["results"] == {
        "xpu@vendor-xpu-a": "XPUAAccelerator",
        "xpu@vendor-xpu-b": "XPUBAccelerator",
        "xpu@Vendor_XPU_B": "XPUBAccelerator",
    }


def test_prefer_picks_b_and_lists_a_as_shadowed(conflict: Scenario) -> None:
    env = {"TORCHPLUG_PREFER": "xpu=vendor-xpu-b"}
    listing = conflict.listing(env=env)
    assert listing.data["settings"]["prefer"] == {"xpu": "vendor-xpu-b"}
    assert listing.entry("xpu", distribution="vendor-xpu-b")["status"] == "ok"
    shadowed = listing.entry("xpu", distribution="vendor-xpu-a")
    assert shadowed["status"] == "shadowed"
    assert shadowed["reason"] == (
        "'xpu' resolves to vendor-xpu-b 2.0.0 (TORCHPLUG_PREFER=xpu=vendor-xpu-b); use 'xpu@vendor-xpu-a' for this one"
    )
    assert get(conflict, "xpu", "xpu@vendor-xpu-a", env=env)["results"] == {
        "xpu": "XPUBAccelerator",
        "xpu@vendor-xpu-a": "XPUAAccelerator",
    }


def test_blocking_b_leaves_a_as_the_only_provider(conflict: Scenario) -> None:
    env = {"TORCHPLUG_BLOCK_PLUGINS": "vendor-xpu-b"}
    listing = conflict.listing(env=env)
    assert listing.states() == {"core": "ok", "vendor-xpu-a": "ok", "vendor-xpu-b": "blocked"}
    assert listing.plugin("vendor-xpu-b")["reason"] == "named in TORCHPLUG_BLOCK_PLUGINS"
    assert [(e["provider"]["distribution"], e["status"]) for e in listing.entries("xpu")] == [("vendor-xpu-a", "ok")]
    assert get(conflict, "xpu", env=env) == {
        "results": {"xpu": "XPUAAccelerator"},
        "modules": ["vendor_xpu_a", "vendor_xpu_a._plugin", "vendor_xpu_a.accelerator"],
    }


def test_a_conflict_is_not_a_failure(conflict: Scenario) -> None:
    for args in (["plugins", "list"], ["plugins", "list", "--check", "--kind", "accelerator"]):
        result = conflict.core(*args, env={"TORCHPLUG_STRICT_PLUGINS": "1"})
        assert result.returncode == 0, str(result)
