"""What the launchers and the Trainer's signal handling share when a run is stopped by a signal.

Launchers register a function that kills their child processes at once (:func:`on_kill`), used by
a second signal; the signal handling says when a stop is under way (:func:`stopping`), so that a
launcher takes a child exiting with 130 or 143 for the agreed stop it is, not for a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = [
    "exit_code",
    "failure_time",
    "is_signal_exit",
    "kill_children_now",
    "note_failure_time",
    "off_kill",
    "on_kill",
    "set_stopping",
    "stopping",
]

_KILLERS: list[Callable[[], None]] = []
_FAILED_AT = "_torchplug_failed_at"
_STOPPING = [False]


def exit_code(signum: int) -> int:
    """The exit status of a process stopped by ``signum``, as a shell reports it: 128 + the signal number."""
    return 128 + int(signum)


def describe_exit(rank: int, pid: int, code: int | None) -> str:
    """How one local rank ended, as every launcher says it: ``Local rank 1 (pid 4242) was killed by signal 9``.

    Args:
        rank: The local rank of the process.
        pid: Its process id.
        code: Its exit code (negative: the signal that killed it); None or 0 for a rank that failed
            without exiting yet (it left a note of its error).
    """
    if code in (None, 0):
        how = "failed"
    else:
        assert code is not None
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"Local rank {rank} (pid {pid}) {how}"


def is_signal_exit(code: int | None) -> bool:
    """Whether a child's exit code is that of a stop by SIGINT or SIGTERM (130, 143, or killed by one)."""
    return code in (130, 143, -2, -15)


def on_kill(kill: Callable[[], None]) -> None:
    """Register ``kill``, which SIGKILLs some child processes without taking locks (it runs in a signal handler)."""
    if kill not in _KILLERS:
        _KILLERS.append(kill)


def off_kill(kill: Callable[[], None]) -> None:
    """Unregister ``kill`` (its children are gone)."""
    if kill in _KILLERS:
        _KILLERS.remove(kill)


def kill_children_now() -> None:
    """Run every registered killer: no child process of this one is left running."""
    for kill in list(_KILLERS):
        try:
            kill()
        except Exception:  # a child already gone: what matters is that none is left running
            pass


def set_stopping(value: bool) -> None:
    """Say that a stop by signal is under way in this process (or is over)."""
    _STOPPING[0] = value


def stopping() -> bool:
    """Whether a stop by signal is under way in this process."""
    return _STOPPING[0]


def note_failure_time(exc: BaseException) -> None:
    """Note on ``exc`` the time (``time.time()``) it reached the Trainer, unless it already holds one.

    Called before the ``on_exception`` hooks, which may talk to the other processes: a process that
    fails in such a talk fails later than this one did.
    """
    if failure_time(exc) is None:
        try:
            setattr(exc, _FAILED_AT, time.time())
        except Exception:  # an exception type that takes no attributes: its launcher uses its own clock
            pass


def failure_time(exc: BaseException) -> float | None:
    """When ``exc`` first reached a Trainer (see :func:`note_failure_time`); None when it never did."""
    value = getattr(exc, _FAILED_AT, None)
    return value if isinstance(value, float) else None
