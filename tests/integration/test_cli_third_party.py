"""``core fit`` picks a third-party accelerator by name, from the command line, once its wheel is installed.

A fresh venv gets torch and the core's wheel; ``vendor-xpu`` (``tests/fixtures/vendor-xpu``), built
to a wheel, is installed beside it after the fact. The model is the command-line tests' tiny one,
copied into a project folder that the commands run from (``--model=tiny_model.TinyModel``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.integration.conftest import REPO_ROOT, PluginSet, Result, Scenario, run

pytestmark = pytest.mark.slow

TINY = REPO_ROOT / "tests" / "core" / "cli" / "tiny.py"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project folder holding the model and data module (``tiny_model.py``)."""
    folder = tmp_path_factory.mktemp("project")
    shutil.copy(TINY, folder / "tiny_model.py")
    return folder


def core_fit(scenario: Scenario, project: Path, root: Path, *args: str) -> Result:
    """Run the venv's ``core fit`` on the tiny model from ``project``, logging under ``root``."""
    command: list[str | Path] = [
        scenario.venv.script("core"),
        "fit",
        "--model=tiny_model.TinyModel",
        "--data=tiny_model.TinyData",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={root}",
        *args,
    ]
    return run(command, scenario.env(), cwd=project)


def test_before_the_plugin_is_installed_xpu_is_a_usage_error(
    plugin_set: PluginSet, project: Path, tmp_path: Path
) -> None:
    result = core_fit(plugin_set(), project, tmp_path, "--trainer.accelerator=xpu")
    assert result.returncode == 2, str(result)
    # (torch itself warns on import in a venv without numpy: only our own line is checked)
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("core fit: error: ")]
    assert error.startswith("core fit: error: --trainer.accelerator=xpu: Unknown accelerator 'xpu'"), str(result)
    assert "Installed: cpu, torch." in error  # the CPU and the generic accelerator, both built in
    assert "Traceback" not in result.stderr


def test_the_installed_accelerator_is_chosen_by_name_and_trains(xpu: Scenario, project: Path, tmp_path: Path) -> None:
    resolved = core_fit(xpu, project, tmp_path, "--trainer.accelerator=xpu", "--resolve")
    assert resolved.returncode == 0, str(resolved)
    accelerator = next(line for line in resolved.stdout.splitlines() if line.startswith("accelerator"))
    assert accelerator.split()[1] == "xpu", accelerator
    result = core_fit(
        xpu, project, tmp_path, "--trainer.accelerator=xpu", "--trainer.devices=1", "--trainer.max_epochs=2"
    )
    assert result.returncode == 0, str(result)
    assert "fit: 2 epoch(s), 8 step(s)" in result.stdout
    (version,) = tmp_path.glob("torchplug_logs/version_*")
    assert (version / "metrics.csv").is_file()
    assert list(version.glob("checkpoints/*.ckpt"))


def test_the_installed_accelerator_runs_ddp_over_two_processes(xpu: Scenario, project: Path, tmp_path: Path) -> None:
    result = core_fit(
        xpu,
        project,
        tmp_path,
        "--trainer.accelerator=vxpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--trainer.max_epochs=1",
        "--seed_everything=3",
    )
    assert result.returncode == 0, str(result)
    # 64 samples, 32 per rank in batches of 16: 2 steps (4 in one process); one summary, from rank 0.
    assert result.stdout.count("fit: 1 epoch(s), 2 step(s)") == 1, str(result)


def test_the_installed_names_are_listed_in_help_and_env(xpu: Scenario, project: Path) -> None:
    help_text = run([xpu.venv.script("core"), "fit", "--help"], xpu.env(), cwd=project)
    assert help_text.returncode == 0, str(help_text)
    assert "Installed: cpu, torch, xpu." in " ".join(help_text.stdout.split())  # torch: the generic accelerator
    env = xpu.core("env", "--json")
    assert env.returncode == 0, str(env)
    report = json.loads(env.stdout)
    assert {p["distribution"]: p["state"] for p in report["plugins"]}["vendor-xpu"] == "ok"
    (device,) = [d for d in report["devices"] if d["accelerator"] == "xpu"]
    assert (device["available"], device["device_count"], device["provider"]) == (True, 2, "vendor-xpu==1.2.0")
