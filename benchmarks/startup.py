"""Start-up cost of ``import torchplug`` and of building a ``torchplug.Trainer``, over ``import torch``.

What is measured:
    The wall time, from spawn to exit, of fresh interpreters (the one running this script) running:

    pass        ``python -c pass``
    torch       ``python -c "import torch"``
    torchplug   ``python -c "import torchplug"`` (imports no torch by design)
    lean        ``import torchplug; torchplug.Trainer(logger=False, enable_checkpointing=False,
                enable_progress_bar=False)``
    default     ``import torchplug; torchplug.Trainer()`` (CSVLogger, ModelCheckpoint, progress bar)

    Each command runs ``--repeats`` times, interleaved (each round runs all of them in a rotating
    order) after two untimed warm-up rounds, in a temporary working directory; the report gives the
    median and the minimum. The cost of torchplug is the median over rounds of (``lean`` - ``torch``)
    and of (``default`` - ``torch``): importing torchplug plus building a Trainer, over importing torch.
    The target is at most 0.2 s for both (PyTorch Lightning 2.6.6 costs 2.7 s more than ``import torch``
    on a machine of this kind: reference-figures.md section 1).

    The children run with the caller's environment less its ``PYTHON*`` variables, so that they read and
    write bytecode caches as a user's interpreter does (``PYTHONDONTWRITEBYTECODE=1`` would make every
    run compile torchplug's sources again); ``--keep-env`` keeps them.

    The same run then checks which modules the ``default`` case imports beyond ``import torch``
    (``torch._dynamo``, sympy and the other heavy modules that Lightning pulls in must not be among
    them), times the phases of that case inside one interpreter (import torch, import torchplug, the
    lazy import of the Trainer, the first ``Trainer()``, a second one, and the full garbage
    collections that fall after ``import torch``), and summarises
    ``python -X importtime -c "import torch; import torchplug; torchplug.Trainer()"`` (median of three
    runs; torch first, so that no torchplug module's cumulative time includes torch's): the modules
    beyond ``import torch`` with the largest cumulative and self times.

    PyTorch Lightning is not installed for this benchmark. If ``lightning`` is importable by the
    interpreter running it, ``import lightning.pytorch`` and ``lightning.pytorch.Trainer()`` are
    measured live in the same rounds; otherwise the reference figures are printed.

How to run it (from the repository root, with the dev venv)::

    python benchmarks/startup.py
    python benchmarks/startup.py --repeats 20 --json

Exit status: 0 when both Trainer cases meet the target and no heavy module is imported, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from _timing import BenchmarkError, Samples, add_json_option, interleaved, paired_overhead, write_json

TARGET_S: Final = 0.200
WARMUP_ROUNDS: Final = 2
IMPORTTIME_RUNS: Final = 3
PHASE_RUNS: Final = 5
TOP: Final = 12

LEAN_ARGS: Final = "logger=False, enable_checkpointing=False, enable_progress_bar=False"
COMMANDS: Final = {
    "pass": "pass",
    "torch": "import torch",
    "torchplug": "import torchplug",
    "lean": f"import torchplug; torchplug.Trainer({LEAN_ARGS})",
    "default": "import torchplug; torchplug.Trainer()",
}
LIGHTNING_COMMANDS: Final = {
    "lightning": "import lightning.pytorch",
    "lightning-trainer": "import lightning.pytorch as pl; pl.Trainer(logger=False, enable_checkpointing=False, "
    "enable_progress_bar=False, enable_model_summary=False)",
}
JUDGED: Final = ("lean", "default")

#: Modules that must not be imported by building a Trainer (Lightning pulls in the first ones).
HEAVY_MODULES: Final = (
    "torch._dynamo",
    "torch._inductor",
    "sympy",
    "torchmetrics",
    "unittest.mock",
    "lightning",
    "pytorch_lightning",
    "tensorboard",
    "tensorboardX",
    "pandas",
    "matplotlib",
    "scipy",
    "torch.utils.tensorboard",
    "torch.distributed.fsdp",
    "torch._functorch",
)

#: PyTorch Lightning 2.6.6 on a 2-core machine of this kind (reference-figures.md section 1).
LIGHTNING_REFERENCE: Final[dict[str, Any]] = {
    "pass": {"median_s": 0.017, "min_s": 0.015},
    "torch": {"median_s": 2.15, "min_s": 1.64},
    "lightning": {"median_s": 4.81, "min_s": 3.60},
    "over_torch_s": 2.7,
    "dynamo_cumulative_s": 1.13,
    "source": "reference-figures.md section 1: Lightning 2.6.6, torch 2.13.0+cpu, Python 3.11.7, --repeats 10",
}

#: Run in a child: which modules the default Trainer case imports beyond ``import torch``.
MODULES_CODE: Final = """
import json, sys
import torch
before = set(sys.modules)
import torchplug
torchplug.Trainer()
after = set(sys.modules)
print(json.dumps({"before": sorted(before), "added": sorted(after - before)}))
"""

#: Run in a child: the phases of the default Trainer case, timed inside one interpreter.
PHASES_CODE: Final = """
import gc, json, time
full = [0.0, 0]  # time and count of full (generation 2) garbage collections after import torch
def watch(phase, info):
    if phase == "start":
        watch.start = time.perf_counter()
    elif info["generation"] == 2:
        full[0] += time.perf_counter() - watch.start
        full[1] += 1
t0 = time.perf_counter()
import torch
gc.callbacks.append(watch)
t1 = time.perf_counter()
import torchplug
t2 = time.perf_counter()
Trainer = torchplug.Trainer
t3 = time.perf_counter()
Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
t4 = time.perf_counter()
Trainer()
t5 = time.perf_counter()
Trainer()
t6 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import torchplug": t2 - t1, "torchplug.Trainer (lazy import)": t3 - t2,
                  "first Trainer(lean)": t4 - t3, "first Trainer() (defaults)": t5 - t4,
                  "second Trainer() (defaults)": t6 - t5, "full gc passes": full[1], "full gc time": full[0]}))
"""


# -- statistics: Samples, paired_overhead and BenchmarkError live in _timing.py ----------------


# -- children ---------------------------------------------------------------------------------


def child_env(keep: bool) -> dict[str, str]:
    """The environment of measured commands: the caller's, less its ``PYTHON*`` variables unless ``keep``."""
    return dict(os.environ) if keep else {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def run_child(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchmarkError(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def time_once(code: str, cwd: Path, env: dict[str, str]) -> float:
    """Wall time of one fresh interpreter running ``code``, spawn to exit, with its output discarded."""
    argv = [sys.executable, "-c", code]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchmarkError(f"python -c {code!r} exited with {proc.returncode}:\n{proc.stderr.decode()}")
    return elapsed


def measure(commands: dict[str, str], repeats: int, cwd: Path, env: dict[str, str]) -> dict[str, Samples]:
    """Time every command ``repeats`` times, interleaved, in a rotating order, after warm-up rounds."""
    return interleaved(commands, repeats, WARMUP_ROUNDS, lambda code: time_once(code, cwd, env), show_rounds=True)


# -- what the Trainer case imports ------------------------------------------------------------


def imported_modules(cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """The modules the default Trainer case adds to ``import torch``, and the heavy ones among them."""
    data = json.loads(run_child([sys.executable, "-c", MODULES_CODE], cwd, env).stdout)
    added: list[str] = data["added"]
    before: set[str] = set(data["before"])

    def present(name: str, modules: Sequence[str] | set[str]) -> bool:
        return any(m == name or m.startswith(name + ".") for m in modules)

    packages: dict[str, int] = {}
    for name in added:
        top = name.partition(".")[0]
        packages[top] = packages.get(top, 0) + 1
    return {
        "added_count": len(added),
        "added_packages": dict(sorted(packages.items(), key=lambda kv: -kv[1])),
        "heavy_added": [h for h in HEAVY_MODULES if present(h, added)],
        "heavy_by_import_torch": [h for h in HEAVY_MODULES if present(h, before)],
        "added": added,
    }


def phases(cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Medians over ``PHASE_RUNS`` fresh interpreters of the phases of the Trainer cases, in seconds."""
    runs = [json.loads(run_child([sys.executable, "-c", PHASES_CODE], cwd, env).stdout) for _ in range(PHASE_RUNS)]
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


_IMPORTTIME: Final = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S.*)$")


def importtime(code: str, cwd: Path, env: dict[str, str], added: set[str]) -> dict[str, Any]:
    """``python -X importtime`` of ``code``: per module the median self and cumulative time of three runs."""
    self_us: dict[str, list[int]] = {}
    cumulative_us: dict[str, list[int]] = {}
    for _ in range(IMPORTTIME_RUNS):
        stderr = run_child([sys.executable, "-X", "importtime", "-c", code], cwd, env).stderr
        for line in stderr.splitlines():
            match = _IMPORTTIME.match(line)
            if match:
                name = match.group(4).strip()
                self_us.setdefault(name, []).append(int(match.group(1)))
                cumulative_us.setdefault(name, []).append(int(match.group(2)))
    own = {name: statistics.median(v) / 1e3 for name, v in self_us.items()}
    cumulative = {name: statistics.median(v) / 1e3 for name, v in cumulative_us.items()}
    beyond = [name for name in own if name in added]
    by_package: dict[str, float] = {}
    for name in beyond:
        top = name.partition(".")[0]
        by_package[top] = by_package.get(top, 0.0) + own[name]
    return {
        "modules": len(own),
        "self_total_ms": sum(own.values()),
        "beyond_torch_modules": len(beyond),
        "beyond_torch_self_ms": sum(own[name] for name in beyond),
        "beyond_torch_by_package_ms": dict(sorted(by_package.items(), key=lambda kv: -kv[1])),
        "top_cumulative_ms": dict(sorted(((n, cumulative[n]) for n in beyond), key=lambda kv: -kv[1])[:TOP]),
        "top_self_ms": dict(sorted(((n, own[n]) for n in beyond), key=lambda kv: -kv[1])[:TOP]),
    }


# -- the report -------------------------------------------------------------------------------


def summarise(samples: dict[str, Samples]) -> dict[str, Any]:
    base = samples["torch"]
    out: dict[str, Any] = {}
    for label in ("torchplug", *JUDGED, *LIGHTNING_COMMANDS):
        if label not in samples:
            continue
        over = (
            paired_overhead(samples[label], base)
            if label != "torchplug"
            else paired_overhead(samples[label], samples["pass"])
        )
        row: dict[str, Any] = {"over": "pass" if label == "torchplug" else "torch", "overhead_s": over}
        if label in JUDGED:
            row.update(target_s=TARGET_S, passed=over <= TARGET_S)
        out[label] = row
    return out


def print_report(
    samples: dict[str, Samples],
    verdicts: dict[str, Any],
    modules: dict[str, Any],
    phase_times: dict[str, float],
    profile: dict[str, Any],
    env_note: str,
    repeats: int,
) -> None:
    print(
        f"torchplug start-up: {repeats} interleaved rounds after {WARMUP_ROUNDS} warm-ups, fresh interpreters, "
        f"spawn to exit; Python {platform.python_version()} ({sys.executable}), {os.cpu_count()} CPUs; {env_note}"
    )
    print()
    print(f"{'case':<18} {'median':>8} {'min':>8}  command")
    commands = {**COMMANDS, **LIGHTNING_COMMANDS}
    for label, sample in samples.items():
        print(f"{label:<18} {sample.median:7.3f}s {sample.min:7.3f}s  python -c {commands[label]!r}")
    print()
    for label, row in verdicts.items():
        verdict = ""
        if "passed" in row:
            verdict = f"  target ≤ {row['target_s']:.1f} s: {'PASS' if row['passed'] else 'FAIL'}"
        what = {
            "torchplug": "import torchplug",
            "lean": "import torchplug + Trainer(lean)",
            "default": "import torchplug + Trainer()",
            "lightning": "import lightning.pytorch",
            "lightning-trainer": "import lightning.pytorch + Trainer(lean)",
        }[label]
        print(f"{what:<42} over {row['over']:<6} (paired median): {row['overhead_s'] * 1e3:+8.1f} ms{verdict}")
    ref = LIGHTNING_REFERENCE
    print(
        f"Lightning 2.6.6 reference: import lightning.pytorch {ref['lightning']['median_s']} s median "
        f"({ref['lightning']['min_s']} s min) against import torch {ref['torch']['median_s']} s "
        f"({ref['torch']['min_s']} s min): {ref['over_torch_s']} s more, of which torch._dynamo "
        f"{ref['dynamo_cumulative_s']} s ({ref['source']})"
    )
    print()
    times = {k: v for k, v in phase_times.items() if not k.startswith("full gc")}
    beyond = sum(v for k, v in times.items() if k != "import torch" and not k.startswith("second"))
    print(
        f"Phases inside one interpreter (median of {PHASE_RUNS} runs): "
        + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items())
    )
    gc_ms, gc_passes = phase_times["full gc time"] * 1e3, phase_times["full gc passes"]
    print(
        f"  import torchplug + Trainer(lean) + Trainer() after import torch: {beyond * 1e3:.1f} ms in all, of "
        f"which {gc_ms:.1f} ms in {gc_passes:.0f} full garbage collection(s)"
    )
    print("  (a full collection walks every object torch created; it comes once enough new objects survive, so")
    print("  importing fewer modules avoids it here, though a program that allocates enough pays it later)")
    print()
    heavy = modules["heavy_added"]
    print(
        f"Modules imported by `import torchplug; torchplug.Trainer()` beyond `import torch`: "
        f"{modules['added_count']} (" + ", ".join(f"{k} {v}" for k, v in modules["added_packages"].items()) + ")"
    )
    print(f"  heavy modules among them: {', '.join(heavy) if heavy else 'none'} (checked: {', '.join(HEAVY_MODULES)})")
    print(
        f"  heavy modules already imported by `import torch` itself: "
        f"{', '.join(modules['heavy_by_import_torch']) or 'none'}"
    )
    print()
    print(
        f"python -X importtime -c 'import torch; import torchplug; torchplug.Trainer()' (median of "
        f"{IMPORTTIME_RUNS} runs): "
        f"{profile['modules']} modules, {profile['self_total_ms']:.0f} ms of import statements; beyond "
        f"`import torch`: {profile['beyond_torch_modules']} modules, {profile['beyond_torch_self_ms']:.1f} ms"
    )
    print(
        "  self time beyond torch by package: "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in profile["beyond_torch_by_package_ms"].items())
    )
    print(
        "  top cumulative beyond torch: "
        + ", ".join(f"{k} {v:.1f}" for k, v in profile["top_cumulative_ms"].items())
        + " (ms)"
    )
    print("  top self beyond torch: " + ", ".join(f"{k} {v:.1f}" for k, v in profile["top_self_ms"].items()) + " (ms)")
    print("  (a module's self time includes a full garbage collection that falls during its import, see above)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds of every command")
    parser.add_argument(
        "--keep-env",
        action="store_true",
        help="keep the caller's PYTHON* variables (PYTHONDONTWRITEBYTECODE...) in the children",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = child_env(args.keep_env)
    dropped = sorted(k for k in os.environ if k.startswith("PYTHON")) if not args.keep_env else []
    env_note = f"children run without {', '.join(dropped)}" if dropped else "children run with the caller's env"
    commands = dict(COMMANDS)
    if importlib.util.find_spec("lightning") is not None:
        commands.update(LIGHTNING_COMMANDS)
    with tempfile.TemporaryDirectory(prefix="torchplug-startup-") as tmp:
        cwd = Path(tmp)
        try:
            samples = measure(commands, args.repeats, cwd, env)
            modules = imported_modules(cwd, env)
            phase_times = phases(cwd, env)
            profile = importtime("import torch; " + COMMANDS["default"], cwd, env, set(modules["added"]))
        except BenchmarkError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    verdicts = summarise(samples)
    if args.json:
        write_json(
            {
                "repeats": args.repeats,
                "python": platform.python_version(),
                "env": env_note,
                "samples": {k: v.as_dict() for k, v in samples.items()},
                "overheads": verdicts,
                "phases_s": phase_times,
                "modules": {k: v for k, v in modules.items() if k != "added"},
                "importtime": profile,
                "lightning_reference": LIGHTNING_REFERENCE,
            },
            args.json,
        )
    if args.json != "-":
        print_report(samples, verdicts, modules, phase_times, profile, env_note, args.repeats)
    passed = all(verdicts[k]["passed"] for k in JUDGED) and not modules["heavy_added"]
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
