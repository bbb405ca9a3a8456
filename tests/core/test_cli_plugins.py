"""``core plugins list`` and ``core plugins show``, run as real subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

MakeDist = Callable[..., str]

BUILTINS = {
    ("accelerator", "cpu"),
    ("strategy", "single_device"),
    ("precision", "32-true"),
    ("checkpoint_io", "torch"),
    ("cluster_environment", "local"),
}


def run_core(*args: str, site: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m torchplug ARGS`` with ``site`` on PYTHONPATH and extra environment variables."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    if site is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), full_env.get("PYTHONPATH", "")]))
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "torchplug", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def test_list_shows_the_builtins_registered_through_the_hooks() -> None:
    result = run_core("plugins", "list")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "KIND", "ALIASES", "PROVIDER", "STATUS", "DESCRIPTION"]
    listed = {(row.split()[1], row.split()[0]) for row in rows if row and not row.startswith(" ")}
    assert listed >= BUILTINS
    cpu = next(row for row in rows if row.startswith("cpu "))
    assert "core==0.1.0" in cpu and " ok " in cpu


def test_json_follows_the_documented_schema() -> None:
    result = run_core("plugins", "list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"schema_version", "core_version", "settings", "discovery_ms", "plugins", "entries"}
    assert data["schema_version"] == 1
    builtin = next(p for p in data["plugins"] if p["builtin"])
    assert builtin["state"] == "ok" and builtin["distribution"] == "core"
    entry = next(e for e in data["entries"] if e["name"] == "cpu")
    assert set(entry) == {
        "kind",
        "name",
        "aliases",
        "target",
        "description",
        "init_params",
        "provider",
        "status",
        "reason",
    }
    assert entry["provider"] == {"plugin": "builtin", "distribution": "core", "version": "0.1.0", "builtin": True}
    assert {(e["kind"], e["name"]) for e in data["entries"]} >= BUILTINS


def test_kind_filter_accepts_plural_and_rejects_unknown_kinds() -> None:
    result = run_core("plugins", "list", "--kind", "accelerators", "--json")
    assert {e["kind"] for e in json.loads(result.stdout)["entries"]} == {"accelerator"}
    bad = run_core("plugins", "list", "--kind", "gpu")
    assert bad.returncode == 2
    assert "unknown kind 'gpu'; choose from accelerator, strategy" in bad.stderr


def test_check_imports_each_class_and_counts_devices() -> None:
    result = run_core("plugins", "list", "--check", "--json")
    assert result.returncode == 0, result.stderr
    cpu = next(e for e in json.loads(result.stdout)["entries"] if e["name"] == "cpu")
    assert cpu["check"]["imported"] and cpu["check"]["available"]
    assert cpu["check"]["device_count"] == 1


def test_broken_plugin_is_listed_with_its_error_and_exits_1(make_dist: MakeDist, site_dir: Path) -> None:
    make_dist("vendor-broken", plugins={"broken": "import tp_missing_runtime\n"})
    listed = run_core("plugins", "list", site=site_dir)
    assert listed.returncode == 1  # as EXIT_CODES says: a broken plugin is a failure, with or without --check
    assert run_core("plugins", "list", "--json", site=site_dir).returncode == 1
    assert "Plugins not loaded:" in listed.stdout
    assert "broken           broken       vendor-broken==1.0" in listed.stdout
    assert "ModuleNotFoundError: No module named 'tp_missing_runtime'" in listed.stdout
    assert run_core("plugins", "list", "--check", site=site_dir).returncode == 1
    strict = run_core("plugins", "list", site=site_dir, TORCHPLUG_STRICT_PLUGINS="1")
    assert strict.returncode == 1
    verbose = run_core("plugins", "list", "-v", site=site_dir)
    assert "Traceback (most recent call last)" in verbose.stdout


def test_bad_environment_variable_exits_2() -> None:
    result = run_core("plugins", "list", TORCHPLUG_STRICT_PLUGINS="perhaps")
    assert result.returncode == 2
    assert "TORCHPLUG_STRICT_PLUGINS='perhaps' is not a boolean" in result.stderr
    assert "Traceback" not in result.stderr


def test_show_prints_one_name_in_full() -> None:
    result = run_core("plugins", "show", "cpu")
    assert result.returncode == 0, result.stderr
    assert "accelerator 'cpu'" in result.stdout
    assert "torchplug.accelerators.cpu:CPUAccelerator" in result.stdout
    assert "devices      1" in result.stdout


def test_show_unknown_name_exits_2_on_stderr() -> None:
    result = run_core("plugins", "show", "nosuchthing")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "no plugin or registered name 'nosuchthing'" in result.stderr


@pytest.mark.parametrize("command", [["plugins", "list"], ["plugins", "list", "--json"], ["plugins", "show", "local"]])
def test_listing_never_imports_torch(command: list[str]) -> None:
    code = (
        "import runpy, sys; sys.argv = ['core', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('torchplug', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-FREE', file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=60, check=False
    )
    assert "TORCH-FREE" in result.stderr, result.stderr


def test_import_torchplug_imports_no_torch() -> None:
    code = "import sys, torchplug; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_help_documents_exit_codes_and_environment_variables() -> None:
    result = run_core("plugins", "list", "--help")
    assert result.returncode == 0
    for text in ("exit codes:", "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD", "TORCHPLUG_BLOCK_PLUGINS", "schema_version"):
        assert text in result.stdout


def test_a_plugin_that_blocks_is_listed_broken_and_the_listing_finishes(
    make_dist: MakeDist, site_dir: Path, tmp_path: Path
) -> None:
    make_dist("vendor-stuck", plugins={"stuck": "import time\nwhile True:\n    time.sleep(0.05)\n"})
    result = run_core("plugins", "list", site=site_dir, TORCHPLUG_PLUGIN_TIMEOUT="0.5")
    assert result.returncode == 1, result.stderr
    assert "stuck            broken       vendor-stuck==1.0" in result.stdout
    assert "did not finish importing within 0.5 s (TORCHPLUG_PLUGIN_TIMEOUT=0.5)" in result.stdout
    assert any(line.split()[:2] == ["cpu", "accelerator"] for line in result.stdout.splitlines())


def test_a_plugin_module_that_imports_torch_is_flagged_with_the_time_it_cost(
    make_dist: MakeDist, site_dir: Path
) -> None:
    make_dist("vendor-heavy", plugins={"heavy": "import torch\n"})
    slow_ok = "600"  # importing torch can pass the default 30 s deadline on a loaded machine: not what this is about
    table = run_core("plugins", "list", site=site_dir, TORCHPLUG_PLUGIN_TIMEOUT=slow_ok)
    assert table.returncode == 0, table.stderr
    flagged = table.stdout.split("Plugins that imported torch while listing (a plugin module must not):\n", 1)[1]
    assert re.match(r"  heavy +vendor-heavy==1\.0  loading it took \d+\.\d\d s\n", flagged), flagged
    listed = run_core("plugins", "list", "--json", site=site_dir, TORCHPLUG_PLUGIN_TIMEOUT=slow_ok)
    record = next(p for p in json.loads(listed.stdout)["plugins"] if p["name"] == "heavy")
    assert record["imports_torch"] is True
    assert "Plugins that imported torch while listing" in listed.stderr  # stdout stays one JSON document


def test_a_bad_plugin_timeout_exits_2() -> None:
    result = run_core("plugins", "list", TORCHPLUG_PLUGIN_TIMEOUT="soon")
    assert result.returncode == 2
    assert "core: error: TORCHPLUG_PLUGIN_TIMEOUT='soon' is not valid. Allowed: a number >= 0." in result.stderr


def test_python_m_torchplug_never_imports_from_the_current_directory(make_dist: MakeDist, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "imported"
    bait = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (project / "torch.py").write_text(bait)
    (project / "tp_test_cwd_plugin.py").write_text(bait)
    info = project / "tp_test_cwd-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tp-test-cwd\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torchplug.plugins]\ncwd = tp_test_cwd_plugin\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    env["TORCHPLUG_PLUGINS"] = "tp_test_cwd_plugin"
    for args in (["plugins", "list", "--json"], ["plugins", "list", "--check", "--kind", "accelerator"]):
        result = subprocess.run(
            [sys.executable, "-m", "torchplug", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "TORCHPLUG_PLUGINS names 'tp_test_cwd_plugin', but no installed plugin" in result.stdout, result.stderr
        assert "tp-test-cwd" not in result.stdout
    assert not marker.exists(), marker.read_text()
