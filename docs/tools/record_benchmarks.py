"""Run the charted benchmarks with ``--json`` and keep their results, with the host and the date, for the docs.

The performance page's charts are drawn from the files this writes (``docs/benchmarks/*.json``),
so a chart always says which machine and which day its figures come from. The benchmarks
measure exactly as when run by hand; this only adds small sizes (``--quick``) and the context.

Run from the repository root, on a quiet machine::

    python docs/tools/record_benchmarks.py            # the benchmarks' default sizes
    python docs/tools/record_benchmarks.py --quick    # fewer rounds: minutes, not tens of minutes
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "benchmarks"

#: The benchmarks charted, with the arguments of a full and of a quick run.
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "step_overhead": ([], ["--steps", "600", "--repeats", "5"]),
    "checkpoint_save": ([], ["--repeats", "3", "--params-scale", "0.25"]),
    "startup": ([], ["--repeats", "5"]),
}


def host() -> dict[str, object]:
    """What the figures depend on: the machine, its load, and the software."""
    import torch

    return {
        "hostname": platform.node(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def record(name: str, extra: list[str]) -> Path:
    """Run one benchmark with ``--json`` and write its result beside the host and the date."""
    command = [sys.executable, f"benchmarks/{name}.py", *extra, "--json"]
    started = datetime.datetime.now(datetime.timezone.utc)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1: a target missed, the figures are still valid
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    doc = {
        "benchmark": name,
        "command": " ".join(["python", *command[1:]]),
        "date": started.isoformat(timespec="seconds"),
        "host": host(),
        "result": _json_document(done.stdout),
    }
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _json_document(stdout: str) -> object:
    """The JSON document a benchmark printed, after any line a run printed before it (a model summary)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line == "{"), None)
    if start is None:
        raise SystemExit(f"no JSON document in the benchmark's output:\n{stdout[-2000:]}")
    return json.loads("\n".join(lines[start:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and a smaller checkpoint")
    parser.add_argument("names", nargs="*", default=list(BENCHMARKS), help="benchmarks to run (default: all)")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        full, quick = BENCHMARKS[name]
        print(f"record_benchmarks: {name} -> {record(name, quick if args.quick else full)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
