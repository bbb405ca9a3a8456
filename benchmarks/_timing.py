"""What the start-up benchmarks share: samples of wall time per command, and their paired comparison."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


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
