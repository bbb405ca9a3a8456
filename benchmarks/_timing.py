"""What the start-up benchmarks share: wall-time samples, the interleaved timing loop, the paired comparison."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


class BenchmarkError(RuntimeError):
    """A set-up step or a measured command failed; the message says which and shows its output."""


@dataclass(slots=True)
class Samples:
    """Wall times of one command, in seconds, one per round."""

    label: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        return min(self.seconds)

    def as_dict(self) -> dict[str, Any]:
        return {"median_s": self.median, "min_s": self.min, "samples_s": [round(s, 6) for s in self.seconds]}


def paired_overhead(slow: Samples, base: Samples) -> float:
    """Median over rounds of ``slow - base`` (both measured in the same rounds)."""
    return statistics.median(s - b for s, b in zip(slow.seconds, base.seconds))


def interleaved(
    commands: Mapping[str, C], repeats: int, warmup: int, time_once: Callable[[C], float], *, show_rounds: bool = False
) -> dict[str, Samples]:
    """Time each command ``repeats`` times with ``time_once``, in a rotating order, after ``warmup`` rounds.

    Rotating the order keeps any effect of a command's position in the round (caches, CPU
    frequency, a neighbour's load) from falling on one command only. ``show_rounds`` prints each
    timed round's figures to stderr as it ends.
    """
    labels = list(commands)
    samples = {label: Samples(label) for label in labels}
    for round_ in range(warmup + repeats):
        shift = round_ % len(labels)
        for label in labels[shift:] + labels[:shift]:
            elapsed = time_once(commands[label])
            if round_ >= warmup:
                samples[label].seconds.append(elapsed)
        if show_rounds and round_ >= warmup:
            done = ", ".join(f"{k} {v.seconds[-1]:.3f}" for k, v in samples.items())
            print(f"  round {round_ - warmup + 1}/{repeats}: {done}", file=sys.stderr, flush=True)
    return samples


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json [PATH]``: the figures as JSON, with the host and the date (README tables are made from it)."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the figures as JSON to PATH (the report is printed too); without PATH, print JSON instead",
    )


def write_json(doc: Any, target: str) -> None:
    """Write ``doc`` (a dict, or a list of rows) with the host, the date and the load to ``target`` ("-": stdout)."""
    header = {
        "host": socket.gethostname(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
    }
    full = {**header, **doc} if isinstance(doc, dict) else {**header, "rows": doc}
    text = json.dumps(full, indent=2)
    if target == "-":
        print(text)
    else:
        Path(target).write_text(text + "\n")
