"""Running every check of a plugin (:func:`verify`) and the report ``core plugins verify`` prints."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from torchplug._host import PluginHost
from torchplug.testing._check import OUTCOMES, Check, CheckResult, checks_for, run_check
from torchplug.testing._context import Context, Subject, UsageError
from torchplug.utilities.printable import printable, printable_lines

__all__ = ["Report", "check_names", "format_result", "name_width", "table_header", "verify"]

#: How each outcome is printed in the report's RESULT column.
_LABELS: Final = {
    "passed": "passed",
    "failed": "FAILED",
    "skipped": "skipped",
    "xfailed": "expected failure",
    "xpassed": "UNEXPECTED PASS",
}


@dataclass
class Report:
    """Every check's result for one plugin, and whether the plugin conforms.

    Attributes:
        subject: The plugin verified.
        results: One result per check, in the order they ran.
        seconds: The whole run's time.
    """

    subject: Subject
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def conforms(self) -> bool:
        """No check failed and no known failure passed unexpectedly."""
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        """How many checks ended in each outcome (outcomes that never happened are left out)."""
        counter = Counter(r.outcome for r in self.results)
        return {outcome: counter[outcome] for outcome in OUTCOMES if counter[outcome]}

    def summary(self) -> str:
        """One line: the counts, the time and the verdict."""
        counts = ", ".join(f"{n} {_LABELS[o].lower()}" for o, n in self.counts().items())
        verdict = "conforms" if self.conforms else "does not conform"
        return f"{counts} in {self.seconds:.1f} s: {self.subject.label} {verdict}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``core plugins verify --json``)."""
        entry = self.subject.entry
        return {
            "kind": self.subject.kind,
            "name": entry.name,
            "target": entry.target_path,
            "provider": entry.provider.as_dict(),
            "accelerator": self.subject.partner() if self.subject.kind != "accelerator" else None,
            "conforms": self.conforms,
            "counts": self.counts(),
            "seconds": round(self.seconds, 3),
            "checks": [r.as_dict() for r in self.results],
        }

    def header(self) -> str:
        """What is verified, from which distribution, trained on which accelerator."""
        entry = self.subject.entry
        line = f"{self.subject.label} ({entry.target_path}) from {entry.provider}"
        if self.subject.kind != "accelerator":
            line += f", trained on accelerator {self.subject.partner()!r}"
        return line

    def format(self, verbose: bool = False) -> str:
        """The report as text: a line per check (check, result, time, detail), the fix under each failure."""
        width = name_width(self.subject.kind)
        lines = [printable(self.header()), "", table_header(width)]
        lines += [format_result(result, width, verbose) for result in self.results]
        lines += ["", printable(self.summary())]
        return "\n".join(lines)


def name_width(kind: str) -> int:
    """The width of the CHECK column for the checks of ``kind``."""
    return max(len("CHECK"), *(len(name) for name in check_names(kind)))


def table_header(width: int) -> str:
    """The column titles of the report."""
    return f"{'CHECK':<{width}}  {'RESULT':<16}  {'TIME':>7}  DETAIL"


def format_result(result: CheckResult, width: int, verbose: bool = False) -> str:
    """One check's lines of the report: check, result, time and detail, then the fix (and traceback) when failed."""
    message = printable_lines(result.message) or [""]
    indent = " " * (width + 4)
    lines = [f"{result.check.name:<{width}}  {_LABELS[result.outcome]:<16}  {result.seconds:>6.2f}s  {message[0]}"]
    lines += [f"{indent}{line}" for line in message[1:]]
    if result.fix:
        lines.append(f"{indent}fix: {printable(result.fix)}")
    if verbose and result.traceback:
        lines += [f"{indent}| {line}" for line in printable_lines(result.traceback.rstrip())]
    return "\n".join(lines)


def check_names(kind: str) -> list[str]:
    """The names of the checks of ``kind``, in the order they run."""
    return [c.name for c in checks_for(kind)]


def _unknown_names(kind: str, names: Sequence[str], where: str) -> None:
    valid = check_names(kind)
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise UsageError(
            f"{where} names unknown check(s) {', '.join(repr(n) for n in unknown)} for {kind} plugins. "
            f"Checks: {', '.join(valid)}"
        )


def verify(
    name: str,
    kind: str | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    known_failures: Mapping[str, str] | None = None,
    host: PluginHost | None = None,
    accelerator: str | None = None,
    variables: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    started: Callable[[Report], None] | None = None,
    progress: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run every conformance check on the plugin registered as ``name``; return the report.

    Args:
        name: A registry name, alias or ``name@provider``.
        kind: Look for the name among this kind only (needed when several kinds use the name).
        skip: Check name to the reason for not running it (reported as skipped).
        known_failures: Check name to the reason it is known to fail (reported as expected failure;
            a pass is reported as an unexpected pass, which fails the verification).
        host: The plugins to look in (default: this process's).
        accelerator: For the other kinds, the accelerator to train on (default: see :meth:`Subject.partner`).
        variables: For a cluster environment, the variables its scheduler sets for a one-process job.
        timeout: Seconds a process started by a check may run.
        started: Called with the (empty) report once the plugin is found, before the first check.
        progress: Called with each result as soon as it is known.

    Raises:
        UsageError: Unknown or ambiguous ``name``, or unknown check names in ``skip`` or ``known_failures``.
    """
    subject = Subject.find(name, kind, host=host, accelerator=accelerator, variables=variables)
    skip, known_failures = dict(skip or {}), dict(known_failures or {})
    _unknown_names(subject.kind, list(skip), "skip")
    _unknown_names(subject.kind, list(known_failures), "known_failures")
    context = Context(subject, timeout=timeout)
    report = Report(subject)
    if started is not None:
        started(report)
    start = time.perf_counter()
    with _quiet_info():
        for item in checks_for(subject.kind):
            result = (
                _skipped(item, skip[item.name])
                if item.name in skip
                else run_check(item, context, known_failures.get(item.name))
            )
            report.results.append(result)
            if progress is not None:
                progress(result)
    report.seconds = time.perf_counter() - start
    return report


@contextlib.contextmanager
def _quiet_info() -> Iterator[None]:
    """The ``torchplug`` logger at WARNING while the checks run: their Trainers' info lines would break the table."""
    log = logging.getLogger("torchplug")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)


def _skipped(item: Check, reason: str) -> CheckResult:
    return CheckResult(item, "skipped", 0.0, reason)
