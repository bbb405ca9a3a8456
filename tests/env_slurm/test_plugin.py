"""The plugin module: ``slurm`` registered by dotted path, found by discovery, and nothing imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.env_slurm.test_detection import SRUN_TASK
from torchplug import plugin_host
from torchplug_slurm import SLURMEnvironment


def test_registered_by_dotted_path_with_its_provider() -> None:
    entry = plugin_host().registry("cluster_environment").resolve("slurm")
    assert entry.target == "torchplug_slurm.environment:SLURMEnvironment"
    assert "srun" in entry.description and "requeue" in entry.description
    assert (entry.provider.distribution, entry.provider.version) == ("env-slurm", "0.1.0")
    assert entry.load() is SLURMEnvironment


def test_plugins_as_a_name() -> None:
    environment = plugin_host().registry("cluster_environment").get("slurm")
    assert isinstance(environment, SLURMEnvironment)


def _python(code: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_nothing_in_the_package_imports_torch() -> None:
    out = _python(
        """
        import sys
        import torchplug_slurm, torchplug_slurm._plugin, torchplug_slurm.environment, torchplug_slurm._hostlist
        import torchplug_slurm._preemption, torchplug_slurm._rendezvous, torchplug_slurm._vendor
        import torchplug_slurm._variables
        torchplug_slurm._vendor.environment_report()
        env = torchplug_slurm.SLURMEnvironment()
        print(env.detect(), env.detect_reason(), env.main_address, env.main_port, env.processes_per_node())
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
        """,
        SRUN_TASK,
    )
    lines = out.splitlines()
    assert lines[0].startswith("True SLURM_JOB_ID=12")
    assert lines[1] == "[]"


@pytest.mark.parametrize(("env", "detected"), [({}, False), (SRUN_TASK, True)], ids=["plain", "srun-task"])
def test_core_plugins_list_shows_slurm_without_importing_torch(env: dict[str, str], detected: bool) -> None:
    out = _python(
        """
        import contextlib, io, json, sys
        from torchplug.cli import main
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            code = main(["plugins", "list", "--json"])
        listing = json.loads(buffer.getvalue())
        entry = next(e for e in listing["entries"] if e["name"] == "slurm")
        print(json.dumps({"code": code, "entry": entry, "torch": "torch" in sys.modules}))
        """,
        env,
    )
    result = json.loads(out)
    assert result["code"] == 0 and result["torch"] is False
    entry = result["entry"]
    assert (entry["status"], entry["detected"]) == ("ok", detected)
    assert entry["reason"].startswith("detected" if detected else "not detected (SLURM_JOB_ID not set)")


def test_environment_report_for_core_env(monkeypatch: pytest.MonkeyPatch, fake_scontrol: Path) -> None:
    for name, value in SRUN_TASK.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHPLUG_SLURM_REQUEUE_SIGNAL", "USR2")
    results = {
        record.distribution: result
        for record, result, error in plugin_host().call_each("torchplug_environment_report")
        if error is None
    }
    section = results["env-slurm"]
    assert section["detected"] is True and section["reason"].startswith("SLURM_JOB_ID=12")
    assert section["settings"]["TORCHPLUG_SLURM_REQUEUE_SIGNAL"] == "USR2"
    assert section["scontrol"] == str(fake_scontrol.parent / "bin" / "scontrol")
    assert section["variables"]["SLURM_NTASKS"] == "2"
    json.dumps(section)
