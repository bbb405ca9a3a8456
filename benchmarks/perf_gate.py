"""The performance gate: instruction counts under callgrind, each against a baseline committed in the repository.

What is measured (each figure in instructions, counted by valgrind's callgrind in marked regions
only, see ``_callgrind.py``: no other process on the host can change them):

    step_lean        one steady-state step of the lean Trainer, over the raw PyTorch loop
    step_defaults    the same for the Trainer's defaults (CSV logger, checkpointing, bar)
    step_log         the defaults with ``self.log(..., prog_bar=True)`` every step
                     (the three: ``step_overhead.py --instructions`` with short runs, the variant's
                     instructions per step minus the raw loop's, from the difference of two fits
                     ``--span`` steps apart in the same process, so a fit's fixed costs cancel)
    import_torchplug ``import torchplug`` in a fresh interpreter
    startup_trainer  ``import torchplug; torchplug.Trainer()`` after ``import torch``
    plugins_list     ``core plugins list`` (every first-party package must be installed)

Not gated yet: ``TorchCheckpointIO.save`` over ``torch.save`` (the region counts came back wrapped
past 2**64 when the save ran; ``checkpoint_save.py`` measures it in wall-clock time meanwhile).

A figure fails when it exceeds its baseline by more than its tolerance: the larger of
``tolerance`` (a share of the baseline, 2% unless the baseline file says otherwise) and
``tolerance_instructions`` (an absolute floor, for the step figures, whose values are small
differences of two large counts: 8,000 instructions, 0.4% of the raw loop's step). The message
gives the figure, the baseline, the delta and the command that measures it with wall-clock
figures beside it.

The gate checks itself: with ``step_lean`` it measures a control in the same child, the lean step
with ``step_overhead.CONTROL_CALLS`` extra Python calls, and fails when that passes
``step_lean``'s limit (a gate that cannot see it would let such a regression through).

How to run it (from the repository root, or ``tox -e perf``, which installs every first-party
package; CI runs ``tox -e perf`` with the rest of the README's test command)::

    python benchmarks/perf_gate.py                       # judge against benchmarks/gate/baselines.json
    python benchmarks/perf_gate.py --only step_lean,import_torchplug
    python benchmarks/perf_gate.py --update              # rewrite the baselines (commit with the reason)
    python benchmarks/perf_gate.py --json gate.json      # also write the figures as JSON

Exit status: 0 when every figure is within its tolerance, 1 when one is not, 2 on a set-up error.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import socket
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from _callgrind import CallgrindError, count_regions

HERE: Final = Path(__file__).resolve().parent
BASELINES: Final = HERE / "gate" / "baselines.json"
DEFAULT_TOLERANCE: Final = 0.02
#: Steps of the longer counted fit, and the steps between the two fits (short: CI's budget).
STEPS: Final = 130
SPAN: Final = 100

#: The distributions of packages/*: ``plugins_list`` is measured with all of them installed.
FIRST_PARTY: Final = tuple(
    sorted(p.name for p in (HERE.parent / "packages").iterdir() if (p / "pyproject.toml").exists())
)

STEP_FIGURES: Final = {"step_lean": "B", "step_defaults": "C", "step_log": "D"}
#: The control: the lean step with a deliberate slow-down (step_overhead.py's variant ``B!``, a few
#: dozen empty Python calls a step), measured with ``step_lean`` in the same child and judged against
#: ``step_lean``'s baseline. It must fail: a gate that lets it pass cannot see a regression that size.
CONTROL: Final = ("step_lean", "B!")

#: What each figure measures, and the benchmark that shows it with wall-clock figures beside it.
FIGURES: Final = {
    "step_lean": ("lean Trainer step, extra instructions over the raw loop", "step_overhead.py --variants A,B"),
    "step_defaults": ("defaults step, extra instructions over the raw loop", "step_overhead.py --variants A,C"),
    "step_log": ("defaults + self.log step, extra over the raw loop", "step_overhead.py --variants A,D"),
    "import_torchplug": ("import torchplug", "startup.py"),
    "startup_trainer": ("import torchplug + Trainer() after import torch", "startup.py"),
    "plugins_list": ("core plugins list, first-party packages installed", "plugins_list.py"),
}

REGION: Final = "from _callgrind import region\n"

#: The children of the figures that are not steps; each region is named after its figure.
CHILD_CODE: Final = {
    "import_torchplug": REGION + "with region('import_torchplug'):\n    import torchplug\n",
    "plugins_list": REGION
    + textwrap.dedent(
        """
        import contextlib, io
        with contextlib.redirect_stdout(io.StringIO()), region('plugins_list'):
            from torchplug.cli import main
            main(['plugins', 'list'])
        """
    ),
    "startup_trainer": REGION
    + textwrap.dedent(
        """
        import torch
        with region('startup_trainer'):
            import torchplug
            torchplug.Trainer()
        """
    ),
}


class GateError(RuntimeError):
    """The gate cannot measure (valgrind, the C compiler or a package missing); the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One figure judged against its baseline."""

    name: str
    value: float
    baseline: float | None
    limit: float | None

    @property
    def passed(self) -> bool:
        return self.limit is None or self.value <= self.limit

    @property
    def delta(self) -> float | None:
        return None if self.baseline is None else self.value - self.baseline

    def line(self) -> str:
        what, _ = FIGURES[self.name]
        if self.baseline is None:
            return f"{self.name:<17} {self.value:>15,.0f}  (no baseline: run with --update)  {what}"
        share = f" ({self.delta / abs(self.baseline):+.2%})" if self.baseline else ""
        verdict = "ok" if self.passed else "FAIL"
        return (
            f"{self.name:<17} {self.value:>15,.0f}  baseline {self.baseline:>15,.0f}  "
            f"delta {self.delta:>+12,.0f}{share}  limit {self.limit:,.0f}  {verdict}"
        )

    def failure(self) -> str:
        what, benchmark = FIGURES[self.name]
        return (
            f"{self.name} ({what}): {self.value:,.0f} instructions against a baseline of {self.baseline:,.0f} "
            f"(delta {self.delta:+,.0f}, limit {self.limit:,.0f}). Measure it: python benchmarks/perf_gate.py "
            f"--only {self.name}; with wall-clock figures: python benchmarks/{benchmark}. If the rise is "
            "intended, run --update and commit benchmarks/gate/baselines.json with the reason."
        )


def judge(figures: dict[str, float], baselines: dict[str, dict[str, Any]]) -> list[Verdict]:
    """Each figure against its baseline: its limit is the baseline plus the larger of the two tolerances."""
    verdicts = []
    for name, value in figures.items():
        entry = baselines.get(name)
        if entry is None:
            verdicts.append(Verdict(name, value, None, None))
            continue
        baseline = float(entry["instructions"])
        margin = max(
            float(entry.get("tolerance", DEFAULT_TOLERANCE)) * abs(baseline),
            float(entry.get("tolerance_instructions", 0)),
        )
        verdicts.append(Verdict(name, value, baseline, baseline + margin))
    return verdicts


def read_baselines(path: Path) -> dict[str, dict[str, Any]]:
    """The baselines file: ``{figure: {"instructions": N, "tolerance": share, ...}}``."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise GateError(f"{path} is not valid JSON: {exc}. Hint: git checkout {path}, or run with --update.") from exc
    return {name: entry for name, entry in data.items() if not name.startswith("_")}


def write_baselines(path: Path, figures: dict[str, float], old: dict[str, dict[str, Any]]) -> None:
    """Rewrite the baselines with ``figures``, one line per figure, keeping each figure's tolerances."""
    entries = {**old}
    for name, value in figures.items():
        entries[name] = {**old.get(name, {}), "instructions": round(value)}
    lines = [f"  {json.dumps(name)}: {json.dumps(entry)}" for name, entry in sorted(entries.items())]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")


# -- measuring --------------------------------------------------------------------------------


def check_installed() -> None:
    missing = []
    for name in FIRST_PARTY:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise GateError(
            f"plugins_list is measured with every first-party package installed; missing: {', '.join(missing)}. "
            "Hint: pip install --no-deps " + " ".join(f"./packages/{m}" for m in missing) + " (tox -e perf does)."
        )


def run_code(name: str, workdir: Path) -> dict[str, int]:
    """Run one child's code natively once (bytecode caches), then under callgrind; its regions' counts."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r})\n" + CHILD_CODE[name]
    argv = [sys.executable, "-c", code]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    import subprocess

    warm = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    if warm.returncode != 0:
        raise GateError(f"the {name} child failed (exit {warm.returncode}):\n{warm.stderr[-3000:]}")
    return count_regions(argv, env=env, cwd=workdir)


def measure_others(names: Sequence[str]) -> dict[str, float]:
    """The figures that are not steps, each from its own fresh child."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="torchplug-gate-") as tmp:
        for child in names:
            figures[child] = run_code(child, Path(tmp))[child]
    return figures


def measure_steps(names: Sequence[str], steps: int, span: int) -> dict[str, float]:
    """The step figures: each variant's instructions per step minus the raw loop's (step_overhead.py).

    With ``step_lean`` comes the control (:data:`CONTROL`), under the key ``control``.
    """
    import step_overhead

    labels = ["A", *(STEP_FIGURES[n] for n in names)]
    if CONTROL[0] in names:
        labels.append(CONTROL[1])
    per_step = step_overhead.measure_instructions(labels, steps, span)
    figures = {name: per_step[STEP_FIGURES[name]] - per_step["A"] for name in names}
    if CONTROL[0] in names:
        figures["control"] = per_step[CONTROL[1]] - per_step["A"]
    return figures


def measure(names: Sequence[str], steps: int, span: int) -> dict[str, float]:
    """Every figure named, the step children and the others at once (two cores)."""
    from concurrent.futures import ThreadPoolExecutor

    step_names = [n for n in names if n in STEP_FIGURES]
    other_names = [n for n in names if n not in STEP_FIGURES]
    jobs: list[Callable[[], dict[str, float]]] = []
    if step_names:
        jobs.append(lambda: measure_steps(step_names, steps, span))
    if other_names:
        jobs.append(lambda: measure_others(other_names))
    figures: dict[str, float] = {}
    with ThreadPoolExecutor(max(1, len(jobs))) as pool:
        for result in pool.map(lambda job: job(), jobs):
            figures.update(result)
    return {name: figures[name] for name in [*names, "control"] if name in figures}


# -- the report -------------------------------------------------------------------------------


def control_calls() -> int:
    """The extra Python calls a step of the control variant."""
    import step_overhead

    return int(step_overhead.CONTROL_CALLS)


def host() -> dict[str, Any]:
    """Where and when the figures were measured."""
    return {
        "host": socket.gethostname(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated figures (default: all): " + ", ".join(FIGURES))
    parser.add_argument("--update", action="store_true", help="rewrite the baselines with the figures measured")
    parser.add_argument("--baselines", type=Path, default=BASELINES, help="the baselines file (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of the longer counted fit")
    parser.add_argument("--span", type=int, default=SPAN, help="steps between the two counted fits")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures and verdicts as JSON")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    if not 0 < args.span < args.steps:
        parser.error(f"--span must be at least 1 and less than --steps ({args.steps}); got {args.span}")
    args.names = names
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        baselines = read_baselines(args.baselines)
        if "plugins_list" in args.names:
            check_installed()
        figures = measure(args.names, args.steps, args.span)
    except (GateError, CallgrindError) as exc:
        print(f"perf_gate: {exc}", file=sys.stderr)
        return 2
    control_value = figures.pop("control", None)
    verdicts = judge(figures, baselines)
    control = None if control_value is None else judge({CONTROL[0]: control_value}, baselines)[0]
    took = time.perf_counter() - started
    print(f"Performance gate: instructions (callgrind), {took:.0f} s, against {args.baselines}")
    for verdict in verdicts:
        print("  " + verdict.line())
    if control is not None:
        print(
            f"  control: {CONTROL[0]} with {control_calls()} extra Python calls a step: {control_value:,.0f}, "
            + ("caught" if not control.passed else "NOT caught")
        )
    if args.json:
        doc = {
            **host(),
            "figures": {
                v.name: {"instructions": v.value, "baseline": v.baseline, "delta": v.delta, "passed": v.passed}
                for v in verdicts
            },
            "ratios": {v.name: v.value / v.baseline for v in verdicts if v.baseline},
        }
        if control is not None:
            doc["control"] = {
                "figure": CONTROL[0],
                "extra_calls_per_step": control_calls(),
                "instructions": control.value,
                "caught": not control.passed,
                "message": control.failure() if not control.passed and control.baseline is not None else None,
            }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if args.update:
        write_baselines(args.baselines, figures, baselines)
        print(f"baselines written to {args.baselines}: commit them with the reason for the change")
        return 0
    failed = [v for v in verdicts if not v.passed]
    for verdict in failed:
        print("FAIL: " + verdict.failure(), file=sys.stderr)
    if control is not None and control.passed and control.baseline is not None:
        print(
            f"FAIL: the gate's control ({CONTROL[0]} with {control_calls()} extra Python calls a step, "
            f"{control.value:,.0f} instructions) passed its limit of {control.limit:,.0f}: the gate cannot see a "
            "slow-down that size. Lower step_lean's tolerance_instructions in benchmarks/gate/baselines.json, "
            "or find what made the step figures noisier.",
            file=sys.stderr,
        )
        failed.append(control)
    missing = [v.name for v in verdicts if v.baseline is None]
    if missing:
        print(f"FAIL: no baseline for {', '.join(missing)}: run with --update and commit it", file=sys.stderr)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
