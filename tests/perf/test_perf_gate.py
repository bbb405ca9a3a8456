"""The performance gate (benchmarks/perf_gate.py): how it judges a figure, and that it catches a slow-down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
BENCHMARKS: Final = REPO / "benchmarks"
#: Extra Python calls per training step injected into the lean Trainer's step (step_overhead.py's
#: TORCHPLUG_BENCH_EXTRA_CALLS): the slow-down the gate must see. With 100-step spans the step figures
#: move by up to ~4k instructions between runs (their floor is 5000), more than one empty call costs.
EXTRA_CALLS: Final = 50


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import perf_gate

    return perf_gate


def test_a_figure_within_its_tolerance_passes(gate: Any) -> None:
    [verdict] = gate.judge({"import_torchplug": 101.0e6}, {"import_torchplug": {"instructions": 100e6}})
    assert verdict.passed
    assert verdict.limit == pytest.approx(102e6)  # the default tolerance: 2% of the baseline


def test_a_figure_past_its_tolerance_fails_with_the_baseline_the_delta_and_the_command(gate: Any) -> None:
    [verdict] = gate.judge({"import_torchplug": 103.0e6}, {"import_torchplug": {"instructions": 100e6}})
    assert not verdict.passed
    message = verdict.failure()
    assert "import_torchplug" in message
    assert "103,000,000 instructions against a baseline of 100,000,000" in message
    assert "delta +3,000,000" in message
    assert "python benchmarks/perf_gate.py --only import_torchplug" in message
    assert "python benchmarks/startup.py" in message


def test_a_step_figure_uses_the_larger_of_its_share_and_its_floor(gate: Any) -> None:
    baselines = {"step_lean": {"instructions": 1000, "tolerance": 0.02, "tolerance_instructions": 300}}
    [inside] = gate.judge({"step_lean": 1290.0}, baselines)
    [outside] = gate.judge({"step_lean": 1310.0}, baselines)
    assert inside.passed
    assert not outside.passed


def test_update_rewrites_one_line_per_figure_and_keeps_the_tolerances(gate: Any, tmp_path: Path) -> None:
    path = tmp_path / "baselines.json"
    old = {"step_lean": {"instructions": 10, "tolerance_instructions": 300}, "plugins_list": {"instructions": 5}}
    gate.write_baselines(path, {"step_lean": 12.4}, old)
    lines = path.read_text().splitlines()
    assert lines == [
        "{",
        '  "plugins_list": {"instructions": 5},',
        '  "step_lean": {"instructions": 12, "tolerance_instructions": 300}',
        "}",
    ]
    assert gate.read_baselines(path) == json.loads(path.read_text())


def test_the_committed_baselines_cover_every_figure(gate: Any) -> None:
    assert set(gate.read_baselines(gate.BASELINES)) == set(gate.FIGURES)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (tools/install-system-deps)")
def test_the_gate_fails_on_extra_python_calls_per_step(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHPLUG_BENCH_EXTRA_CALLS": str(EXTRA_CALLS)}
    report = tmp_path / "gate.json"
    command = [sys.executable, str(BENCHMARKS / "perf_gate.py"), "--only", "step_lean", "--json", str(report)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=REPO, timeout=900)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: step_lean (lean Trainer step" in result.stderr
    assert "python benchmarks/perf_gate.py --only step_lean" in result.stderr
    figure = json.loads(report.read_text())["figures"]["step_lean"]
    assert figure["delta"] > 0
    assert not figure["passed"]
