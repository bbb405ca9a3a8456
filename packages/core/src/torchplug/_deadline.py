"""Running plugin code under a deadline, so that a plugin that blocks never hangs torchplug.

Third-party plugin code (an import, a registration hook, ``is_available()``, a probe,
``detect()``) runs in one daemon worker thread per batch of calls, while the calling thread waits
for each call at most ``timeout`` seconds. A call that overstays is abandoned: its outcome is
"timed out", the calls after it go on in a fresh worker, and the abandoned thread is left to
finish (or not) on its own. Being a daemon thread that nothing joins (no ``concurrent.futures``,
whose exit handler joins its workers), it never keeps the process alive at exit.

An abandoned call must not change anything once its caller has moved on: each call receives a
:class:`Ticket`, and commits its results only inside ``with ticket.committing():``, which
raises :class:`Abandoned` once the deadline has passed. The caller marks the ticket abandoned
under the same lock, so a result is either committed before the deadline or never.

One thread serves a whole batch (discovery of 200 plugins starts one thread, not 200), and the
waiting thread wakes only at deadlines, so a batch that runs to completion costs one thread
start. A timeout of 0 (``TORCHPLUG_PLUGIN_TIMEOUT=0``) runs the calls inline, with no deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

__all__ = ["Abandoned", "Outcome", "Ticket", "describe_timeout", "run_each", "run_one"]

_T = TypeVar("_T")

#: Name of the worker threads (shown by debuggers and ``threading.enumerate()``).
THREAD_NAME: Final = "torchplug-plugin-worker"


class Abandoned(Exception):
    """Raised inside a call that tries to commit after its deadline passed (the caller has moved on)."""


class Ticket:
    """What one call may do with its results: commit them while its caller still waits for it.

    Attributes:
        phase: What the call is doing, in words (``"importing"``, ``"running its
            torchplug_register_accelerators hook"``); the call updates it so that a timeout can say
            where it stopped.
    """

    __slots__ = ("_abandoned", "_lock", "phase")

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = lock if lock is not None else threading.RLock()
        self._abandoned = False
        self.phase = "running"

    @property
    def abandoned(self) -> bool:
        """Whether the caller gave up on this call (its deadline passed)."""
        return self._abandoned

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Hold the batch's lock while changing shared state; raise :class:`Abandoned` if too late."""
        with self._lock:
            if self._abandoned:
                raise Abandoned("the deadline of this call has passed; its results are discarded")
            yield

    def _abandon(self) -> None:
        self._abandoned = True


@dataclass(slots=True)
class Outcome(Generic[_T]):
    """How one call ended.

    Attributes:
        value: What the call returned (None when it raised or timed out).
        error: What it raised, if it did.
        timed_out: True when it did not finish within the deadline (or was skipped because an
            earlier call of the same group timed out).
        phase: The call's :attr:`Ticket.phase` when it ended, raised or timed out.
        seconds: How long it ran (up to the deadline when it timed out).
        skipped: True when it never started because an earlier call of its group timed out.
    """

    value: _T | None = None
    error: BaseException | None = None
    timed_out: bool = False
    phase: str = ""
    seconds: float = 0.0
    skipped: bool = False


#: One call of a batch: the function (given its :class:`Ticket`) and its group (calls of one plugin
#: share a group: once one of them times out, the rest are skipped instead of each waiting in turn).
Call = tuple[Callable[[Ticket], _T], Hashable]


class _Worker(Generic[_T]):
    """Runs the calls of a batch from ``start`` on, in one thread, recording when each began."""

    def __init__(self, calls: Sequence[Call[_T]], outcomes: list[Outcome[_T] | None], start: int) -> None:
        self.calls = calls
        self.outcomes = outcomes
        self.lock = threading.RLock()
        self.index = start
        self.began = time.monotonic()
        self.ticket = Ticket(self.lock)
        self.finished = threading.Event()
        self.abandoned = False  # set by the waiting thread at a deadline: this worker does nothing more

    def run(self) -> None:
        for index in range(self.index, len(self.calls)):
            ticket = Ticket(self.lock)
            with self.lock:
                if self.abandoned:
                    return
                if self.outcomes[index] is not None:  # skipped: its group timed out
                    continue
                self.index, self.began, self.ticket = index, time.monotonic(), ticket
            start = time.perf_counter()
            try:
                outcome: Outcome[_T] = Outcome(value=self.calls[index][0](ticket))
            except BaseException as exc:  # plugin code: whatever it raises is its outcome, recorded
                outcome = Outcome(error=exc)
            outcome.seconds, outcome.phase = time.perf_counter() - start, ticket.phase
            with self.lock:
                if ticket.abandoned:
                    return  # the caller moved on without us: a fresh worker runs the rest
                self.outcomes[index] = outcome
        self.finished.set()

    def abandon(self) -> None:
        """Give up on this worker: its current call commits nothing, and it starts no other."""
        with self.lock:
            self.abandoned = True
            self.ticket._abandon()

    def wait(self, timeout: float) -> int | None:
        """Wait until done (None) or until a call overstays: then abandon it and return its index."""
        remaining = timeout
        while not self.finished.wait(remaining):
            with self.lock:
                if self.outcomes[self.index] is not None:  # done in time; the next call is about to begin
                    remaining = min(timeout, 0.01)
                    continue
                elapsed = time.monotonic() - self.began
                if elapsed >= timeout:
                    self.abandon()
                    self.outcomes[self.index] = Outcome(timed_out=True, phase=self.ticket.phase, seconds=elapsed)
                    return self.index
                remaining = timeout - elapsed
        return None


def run_each(calls: Sequence[Call[_T]], timeout: float) -> list[Outcome[_T]]:
    """Run each call, in order, each within ``timeout`` seconds; never raises for a call.

    Args:
        calls: ``(function, group)`` pairs; each function is given its :class:`Ticket`. Once a
            call times out, the later calls of its group are skipped (timed out, ``skipped=True``).
        timeout: Seconds each call may take; 0 runs them inline in this thread, with no deadline.

    Returns:
        One :class:`Outcome` per call, in order.
    """
    if timeout <= 0:
        return [_inline(function) for function, _ in calls]
    outcomes: list[Outcome[_T] | None] = [None] * len(calls)
    start = 0
    while start < len(calls):
        worker = _Worker(calls, outcomes, start)
        thread = threading.Thread(target=worker.run, name=THREAD_NAME, daemon=True)
        thread.start()
        try:
            late = worker.wait(timeout)
        except BaseException:  # Ctrl-C while waiting: the worker must not commit anything after this
            worker.abandon()
            raise
        if late is None:
            thread.join()  # it is returning: joined so that no thread is left when a process forks
            break
        group = calls[late][1]
        for index in range(late + 1, len(calls)):
            if calls[index][1] == group and outcomes[index] is None:
                outcomes[index] = Outcome(timed_out=True, skipped=True)
        start = late + 1
    return [outcome if outcome is not None else Outcome() for outcome in outcomes]


def _inline(function: Callable[[Ticket], _T]) -> Outcome[_T]:
    start = time.perf_counter()
    ticket = Ticket()
    try:
        outcome: Outcome[_T] = Outcome(value=function(ticket))
    except (Exception, SystemExit) as exc:  # plugin code; KeyboardInterrupt still stops everything
        outcome = Outcome(error=exc)
    outcome.seconds, outcome.phase = time.perf_counter() - start, ticket.phase
    return outcome


def run_one(function: Callable[[], _T], timeout: float) -> Outcome[_T]:
    """Run one call within ``timeout`` seconds (0: inline, no deadline); see :func:`run_each`."""
    return run_each([(lambda _ticket: function(), None)], timeout)[0]


def describe_timeout(outcome: Outcome[Any], timeout: float) -> str:
    """``"did not finish importing within 2 s"``: what an outcome that timed out was doing."""
    what = outcome.phase if outcome.phase and outcome.phase != "running" else "running"
    return f"did not finish {what} within {timeout:g} s"
