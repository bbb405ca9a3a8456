"""The core alone, installed from its wheel in a fresh venv: its built-ins and the ``--json`` document."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import PluginSet, Scenario, Wheel

pytestmark = pytest.mark.slow

#: (kind, name, aliases) of the built-ins every core has (the core may register more).
BUILTINS = [
    ("accelerator", "cpu", []),
    ("strategy", "single_device", []),
    ("precision", "32-true", ["32"]),
    ("checkpoint_io", "torch", []),
    ("cluster_environment", "local", []),
    ("logger", "csv", []),
]


@pytest.fixture(scope="module")
def core_only(plugin_set: PluginSet) -> Scenario:
    """The fresh venv with the core and no plugin distribution at all."""
    return plugin_set()


def test_core_is_installed_from_its_wheel(core_only: Scenario, core_wheel: Wheel) -> None:
    info = core_only.python_json(
        "import importlib.metadata as m, json, torchplug\n"
        "dist = m.distribution('core')\n"
        "print(json.dumps({'file': torchplug.__file__, 'version': torchplug.__version__,\n"
        "                  'direct_url': json.loads(dist.read_text('direct_url.json') or '{}'),\n"
        "                  'torch': m.version('torch')}))"
    )
    assert info["file"].startswith(str(core_only.venv.root))
    assert info["version"] == core_wheel.version
    assert info["direct_url"]["url"].endswith(core_wheel.path.name)
    assert "archive_info" in info["direct_url"]  # a wheel file, not an editable or a source tree
    assert info["torch"].split("+")[0] == "2.13.0"


def test_builtins_are_listed_ok_from_core(core_only: Scenario, core_wheel: Wheel) -> None:
    result = core_only.core("plugins", "list")
    assert result.returncode == 0, str(result)
    rows = {(r["kind"], r["name"]): r for r in result.table()}
    for kind, name, aliases in BUILTINS:
        row = rows[kind, name]
        assert (row["aliases"], row["provider"], row["status"]) == (",".join(aliases) or "-", core_wheel.label, "ok")
    assert {r["provider"] for r in rows.values()} == {core_wheel.label}
    assert "Plugins not loaded" not in result.stdout


def test_builtins_in_json(core_only: Scenario, core_wheel: Wheel) -> None:
    listing = core_only.listing()
    assert listing.data["core_version"] == core_wheel.version
    assert listing.plugins == [
        {
            "name": "builtin",
            "module": "torchplug._builtin",
            "distribution": "core",
            "version": core_wheel.version,
            "state": "ok",
            "reason": None,
            "requires_core": None,
            "builtin": True,
            "load_ms": listing.plugins[0]["load_ms"],
            "imports_torch": False,
        }
    ]
    provider = {"plugin": "builtin", "distribution": "core", "version": core_wheel.version, "builtin": True}
    assert all(e["provider"] == provider for e in listing.data["entries"])
    for kind, name, aliases in BUILTINS:
        entry = listing.entry(name, kind)
        # cluster environments also say whether they are detected here; `local` always is
        expected_reason = "detected" if kind == "cluster_environment" else None
        assert (entry["aliases"], entry["status"], entry["reason"]) == (aliases, "ok", expected_reason)


def test_without_tensorboard_its_logger_is_listed_unavailable_with_the_hint(core_only: Scenario) -> None:
    tensorboard = core_only.listing().entry("tensorboard", "logger")  # tensorboard is an extra of the core
    assert (tensorboard["aliases"], tensorboard["status"]) == (["tb"], "unavailable")
    assert "tensorboard is not installed. Hint: pip install tensorboard" in tensorboard["reason"]


def test_every_builtin_imports_from_the_wheel(core_only: Scenario) -> None:
    listing = core_only.listing("--check")
    broken = [(e["name"], e["check"]["error"]) for e in listing.data["entries"] if not e["check"]["imported"]]
    assert broken == []
    assert listing.entry("cpu")["check"]["device_count"] == 1


def _render(keys: dict[str, Any]) -> str:
    """Keys as JSON_SCHEMA_HELP writes them: ``a, b, nested {x, y}``."""
    return ", ".join(f"{k} {{{_render(v)}}}" if isinstance(v, dict) and v else k for k, v in keys.items())


@pytest.mark.parametrize("check", [False, True], ids=["list", "list-check"])
def test_json_follows_the_documented_schema(core_only: Scenario, check: bool) -> None:
    data = core_only.listing(*(["--check", "--kind", "accelerator"] if check else [])).data
    help_text = core_only.core("plugins", "list", "--help").stdout
    documented = " ".join(help_text.split())

    assert data["schema_version"] == 1
    assert f"(schema_version {data['schema_version']})" in documented
    assert list(data) == ["schema_version", "core_version", "settings", "discovery_ms", "plugins", "entries"]
    top = {k: v for k, v in data.items() if k in ("core_version", "settings", "discovery_ms")}
    assert f"{_render(top)}, plugins: [{{{_render(data['plugins'][0])}}}]" in documented
    entry = data["entries"][0]
    assert list(entry) == [
        "kind",
        "name",
        "aliases",
        "target",
        "description",
        "init_params",
        "provider",
        "status",
        "reason",
        *(["check"] if check else []),
    ]
    rendered = _render({**entry, "init_params": {}})  # init params differ from entry to entry
    detected = "detected (cluster environments only: whether detect() says yes here), "
    if check:
        head, _, tail = rendered.partition(", check {")
        assert f"entries: [{{{head}, {detected}check {{{tail} (with --check)}}]" in documented
        assert all(list(e["check"]) == list(entry["check"]) for e in data["entries"])
    else:
        assert f"entries: [{{{rendered}, {detected}check {{" in documented
    environments = [e for e in data["entries"] if e["kind"] == "cluster_environment"]
    assert all(list(e)[-1 if not check else -2] == "detected" for e in environments)

    legend = re.search(r"plugin states: (.*?) entry statuses: (.*?) environment variables:", documented)
    assert legend is not None, help_text
    assert {p["state"] for p in data["plugins"]} <= set(legend.group(1).split(", "))
    assert {e["status"] for e in data["entries"]} <= set(legend.group(2).split(", "))
    assert data["settings"] == {
        "autoload": True,
        "requested": [],
        "blocked": [],
        "strict": False,
        "prefer": {},
        "timeout": 30.0,
    }
    assert isinstance(data["discovery_ms"], float)
