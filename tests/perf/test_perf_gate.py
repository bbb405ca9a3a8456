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
#: Set by ``tox -e perf``: the JSON report of the gate's own run just before this test, whose control
#: (the lean step with a deliberate slow-down, measured in the same child) this test reads back.
REPORT_ENV: Final = "TORCHPLUG_GATE_REPORT"


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


def test_the_gate_fails_when_its_control_passes(
    gate: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    baselines = tmp_path / "baselines.json"
    baselines.write_text(json.dumps({"step_lean": {"instructions": 100, "tolerance_instructions": 1000}}))
    monkeypatch.setattr(gate, "measure", lambda names, steps, span: {"step_lean": 120.0, "control": 900.0})
    assert gate.main(["--only", "step_lean", "--baselines", str(baselines)]) == 1
    err = capsys.readouterr().err
    assert "the gate's control" in err
    assert "cannot see a slow-down that size" in err


def test_the_gate_passes_when_its_control_is_caught(gate: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    baselines = tmp_path / "baselines.json"
    baselines.write_text(json.dumps({"step_lean": {"instructions": 100, "tolerance_instructions": 1000}}))
    monkeypatch.setattr(gate, "measure", lambda names, steps, span: {"step_lean": 120.0, "control": 5000.0})
    report = tmp_path / "gate.json"
    assert gate.main(["--only", "step_lean", "--baselines", str(baselines), "--json", str(report)]) == 0
    control = json.loads(report.read_text())["control"]
    assert control["caught"]
    assert "python benchmarks/perf_gate.py --only step_lean" in control["message"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (tools/install-system-deps)")
def test_the_gate_catches_a_deliberate_slow_down_of_the_lean_step(tmp_path: Path) -> None:
    """The control measured for real: the lean step with extra Python calls fails step_lean's limit.

    Under ``tox -e perf`` the gate has just run: its report is read back (the control shares the gate's
    callgrind child). Run alone, the test runs ``perf_gate.py --only step_lean`` itself.
    """
    if os.environ.get(REPORT_ENV):
        doc = json.loads(Path(os.environ[REPORT_ENV]).read_text())
    else:
        report = tmp_path / "gate.json"
        command = [sys.executable, str(BENCHMARKS / "perf_gate.py"), "--only", "step_lean", "--json", str(report)]
        result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO, timeout=1200)
        assert result.returncode in (0, 1), result.stdout + result.stderr
        doc = json.loads(report.read_text())
    control, lean = doc["control"], doc["figures"]["step_lean"]
    assert control["caught"], control
    assert control["instructions"] > lean["instructions"]
    assert "step_lean (lean Trainer step" in control["message"]
    assert "python benchmarks/perf_gate.py --only step_lean" in control["message"]
