"""What a conformance check is, how checks are registered, and how one check's outcome is recorded.

Each check is a plain function of a :class:`~torchplug.testing.Context` that returns normally
(passed, optionally with a detail in words), raises :class:`CheckSkipped` (cannot run here, and
why) or fails (:class:`CheckFailed`, an ``AssertionError``, or any other exception the plugin
raised). Both front ends, ``core plugins verify`` and the pytest suites, run the same functions
through :func:`run_check`. This module imports no torch.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from torchplug._registry import KINDS
from torchplug.utilities.printable import printable

if TYPE_CHECKING:
    from torchplug.testing._context import Context

__all__ = [
    "OUTCOMES",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "Outcome",
    "check",
    "checks_for",
    "run_check",
]

#: What a check can end as.
Outcome = Literal["passed", "failed", "skipped", "xfailed", "xpassed"]

#: Every outcome, with what it means (the report's legend).
OUTCOMES: Final[dict[Outcome, str]] = {
    "passed": "the plugin meets this part of its contract",
    "failed": "the plugin breaks this part of its contract; the fix says what to change",
    "skipped": "the check cannot run here (no device, no vendor library...); the reason says why",
    "xfailed": "expected failure: it fails, as the vendor declared (with the reason given)",
    "xpassed": "a declared known failure now passes: remove it from the known failures",
}

#: The modules that define checks, imported on first use (each registers its checks).
_CHECK_MODULES: Final = (
    "torchplug.testing._checks_common",
    "torchplug.testing._checks_accelerator",
    "torchplug.testing._checks_strategy",
    "torchplug.testing._checks_io",
    "torchplug.testing._checks_environment",
    "torchplug.testing._checks_logger",
    "torchplug.testing._checks_training",  # last: the checks that train take the longest
)


class CheckSkipped(Exception):
    """Raised by a check that cannot run here; the message says why (``"needs 2 devices, found 1"``)."""


class CheckFailed(AssertionError):
    """Raised by a check whose contract the plugin breaks; the message says what was found."""


CheckFunction = Callable[["Context"], "str | None"]


@dataclass(frozen=True, slots=True)
class Check:
    """One conformance check: its name, the kinds it applies to, what it verifies and how to fix a failure.

    Attributes:
        name: Unique within a kind; what ``--skip`` and ``known_failures`` name (``"parse_devices_junk"``).
        kinds: The plugin kinds it applies to.
        summary: One line: what the check verifies.
        fix: What to change in the plugin when the check fails.
        function: The check itself; returns an optional detail in words.
    """

    name: str
    kinds: tuple[str, ...]
    summary: str
    fix: str
    function: CheckFunction = field(repr=False, compare=False)


_REGISTRY: dict[str, list[Check]] = {kind: [] for kind in KINDS}
_loaded = False


def check(kinds: str | Iterable[str], name: str, *, summary: str, fix: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as check ``name`` for ``kinds`` (a kind or several)."""
    kind_list = (kinds,) if isinstance(kinds, str) else tuple(kinds)

    def register(function: CheckFunction) -> CheckFunction:
        item = Check(name, kind_list, summary, fix, function)
        for kind in kind_list:
            if kind not in _REGISTRY:
                raise ValueError(f"unknown plugin kind {kind!r} for check {name!r}; expected one of {', '.join(KINDS)}")
            if any(c.name == name for c in _REGISTRY[kind]):
                raise ValueError(f"check {name!r} is registered twice for {kind}")
            _REGISTRY[kind].append(item)
        return function

    return register


def checks_for(kind: str) -> list[Check]:
    """Every check of ``kind``, in the order they run (cheap contract checks first, training last).

    Raises:
        ValueError: ``kind`` is not one of the six plugin kinds.
    """
    global _loaded
    if kind not in _REGISTRY:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not _loaded:
        import importlib

        for module in _CHECK_MODULES:
            importlib.import_module(module)
        _loaded = True
    return list(_REGISTRY[kind])


@dataclass(slots=True)
class CheckResult:
    """The outcome of one check on one plugin.

    Attributes:
        check: The check that ran.
        outcome: passed, failed, skipped, xfailed or xpassed (see :data:`OUTCOMES`).
        seconds: How long it took.
        message: The detail (passed), the reason (skipped, xfailed with the failure appended), or
            what went wrong (failed, xpassed).
        traceback: For a failure raised by plugin code, where it was raised.
    """

    check: Check
    outcome: Outcome
    seconds: float
    message: str = ""
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        """Whether this outcome lets the plugin conform (everything but failed and xpassed)."""
        return self.outcome not in ("failed", "xpassed")

    @property
    def fix(self) -> str | None:
        """What to change, for an outcome that needs a change."""
        if self.outcome == "failed":
            return self.check.fix
        if self.outcome == "xpassed":
            return f"remove {self.check.name!r} from the known failures: it passes now"
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``core plugins verify --json``)."""
        return {
            "check": self.check.name,
            "summary": self.check.summary,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 4),
            "message": self.message,
            "fix": self.fix,
            "traceback": self.traceback,
        }


def run_check(item: Check, context: Context, known_failure: str | None = None) -> CheckResult:
    """Run one check and record its outcome; never raises (except ``KeyboardInterrupt``).

    Args:
        item: The check.
        context: The plugin under test and the check's working directory.
        known_failure: The vendor's reason when this check is declared to fail: a failure is then
            ``xfailed`` and a pass ``xpassed``.
    """
    start = time.perf_counter()
    trace: str | None = None
    try:
        with context.isolated():
            detail = item.function(context)
        outcome: Outcome = "passed"
        message = detail or ""
    except CheckSkipped as exc:
        outcome, message = "skipped", str(exc)
    except AssertionError as exc:
        outcome, message = "failed", str(exc) or f"{item.name} failed"
    except Exception as exc:  # plugin code raised: that is the finding, with where it came from
        # The plugin's own text stays on the check's one line: its newlines cannot start lines of the report.
        outcome, message = "failed", f"{type(exc).__name__}: {printable(exc)}"
        trace = "".join(traceback.format_exception(exc))
    finally:
        seconds = time.perf_counter() - start
        context.close()
    if known_failure is not None:
        if outcome == "failed":
            outcome, message = "xfailed", f"{known_failure} (fails with: {message})"
        elif outcome == "passed":
            outcome, message = "xpassed", f"declared as a known failure ({known_failure}), but it passes"
    return CheckResult(item, outcome, seconds, message, trace)
