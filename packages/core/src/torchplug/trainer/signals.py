"""SIGINT and SIGTERM during ``fit``: every process stops after the same step, with a checkpoint, and exits 130 or 143.

While ``fit`` runs, on the main thread, and where the signal's disposition is still the default
one (a handler of the user's, or of a cluster environment such as SLURM's, is left in place),
the first SIGINT or SIGTERM only takes note. The training loop then stops at a batch boundary
(the step in progress finishes), raising :class:`~torchplug.TrainingInterrupted` on every process
at the same boundary; the Trainer runs the exception hooks there (``ModelCheckpoint`` writes
``interrupted.ckpt``), flushes the loggers, and ``fit`` ends with ``SystemExit(128 + signal)``:
exit status 130 for SIGINT, 143 for SIGTERM. A second signal exits at once (the same status),
stopping this process's child processes first.

With several processes, the one that got the signal may be alone (``kill <pid>`` of one rank),
and each process may be a batch ahead of another. They agree through the rendezvous store,
without any cost per step: a thread in each process watches for a request; once there is one,
each process reports its position at every batch boundary, rank 0's thread fixes a boundary
that no process has passed yet, and every process waits there until all have arrived.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from typing_extensions import override

from torchplug._errors import TrainingInterrupted
from torchplug.utilities.rank_zero import log
from torchplug.utilities.shutdown import exit_code, kill_children_now, set_stopping

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

    from torchplug.trainer.trainer import Trainer

__all__ = ["SignalStop"]

_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: Seconds between two looks at the store for a stop request (and, while stopping, at the positions).
_POLL_S: Final = 0.1

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _is_default(signum: int, handler: _Handler) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler in (signal.SIG_DFL, None)


#: Messages already logged by :func:`_inform` (a process running fit() many times says each once).
_INFORMED: set[str] = set()


def _inform(text: str) -> None:
    """Log why the signals are not handled, once per process for each distinct reason."""
    if text not in _INFORMED:
        _INFORMED.add(text)
        log.info(text)


def _say(text: str) -> None:
    """Write a line to stderr without Python's buffered streams (safe inside a signal handler)."""
    try:
        os.write(2, f"torchplug: {text}\n".encode())
    except OSError:
        pass


class SignalStop:
    """Turns SIGINT and SIGTERM during ``fit`` into a clean stop at a step boundary (see the module's docstring).

    Args:
        trainer: The Trainer whose ``fit`` is watched (its world size, rank and progress are read).
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        #: True once a stop was asked for, here or in another process: the loop calls :meth:`at_boundary`.
        self.hold = False
        #: The first signal this process received during ``fit`` (None when none).
        self.signum: int | None = None
        self._previous: dict[int, _Handler] = {}
        self._agreement: _Agreement | None = None
        self._runs = 0

    @property
    def active(self) -> bool:
        """Whether handlers are installed (``fit`` is running on the main thread)."""
        return bool(self._previous)

    def start(self) -> None:
        """Install the handlers where the disposition is the default one (main thread only); at ``fit`` start."""
        self.hold, self.signum = False, None
        set_stopping(False)
        self._runs += 1
        if threading.current_thread() is not threading.main_thread():
            _inform("SIGINT/SIGTERM are not handled: fit() runs outside the main thread")
            return
        trainer = self._trainer
        store = None
        if trainer.world_size > 1:
            from torchplug.utilities.distributed import rendezvous_store

            store = rendezvous_store()
            if store is None:  # stopping alone would leave the others waiting in a collective
                _inform("SIGINT/SIGTERM keep their default action: the processes have no rendezvous store to agree")
                return
        for signum in _SIGNALS:
            current = signal.getsignal(signum)
            if _is_default(signum, current):
                self._previous[signum] = signal.signal(signum, self._handle)
            else:
                _inform(f"{signal.Signals(signum).name} keeps the handler already installed ({current!r})")
        if self._previous and store is not None:
            self._agreement = _Agreement(self, store, self._runs, trainer.global_rank, trainer.world_size)
            self._agreement.start()

    def stop(self) -> None:
        """Restore the previous handlers and end the agreement thread; at the end of ``fit``."""
        agreement, self._agreement = self._agreement, None
        if agreement is not None:
            agreement.finish()
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def at_boundary(self, position: int) -> None:
        """Called by the loop at a batch boundary while :attr:`hold`: raise the interruption when it is time.

        Args:
            position: Batches trained so far in this fit (the same count in every process).

        Raises:
            TrainingInterrupted: Every process stops here.
        """
        agreement = self._agreement
        if agreement is not None and not agreement.stop_here(position):
            return
        signum = self.signum or (agreement.signum if agreement is not None else None) or signal.SIGTERM
        step = self._trainer.global_step
        set_stopping(True)  # the launchers take the other processes' exit with 130/143 for this stop
        raise TrainingInterrupted(
            f"fit() stopped by {signal.Signals(signum).name} after global step {step}.", signum, step
        )

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:  # the second one: the user does not want to wait
            _say(f"{name} again: exiting now, without a checkpoint.")
            kill_children_now()
            os._exit(exit_code(signum))
        self.signum = signum
        _say(
            f"{name} received: stopping after the current step, with a checkpoint (send {name} again to exit at once)."
        )
        if self._agreement is not None:
            self._agreement.request(signum)
        self.hold = True


class _Agreement(threading.Thread):
    """Agrees, through the rendezvous store, on the batch boundary where every process stops.

    Keys (under ``signals/<restart>/<run>/``): ``request`` (a signal number, from the process that
    got a signal), ``at/<rank>`` (each process's last boundary since), ``target`` (the boundary
    rank 0 fixed), ``waiting/<rank>`` (the target a process waits at), ``final`` (the target once
    every process waits there; -1 when rank 0's fit ended first, and everyone carries on to its end).

    A process that passed the target before it was fixed makes rank 0 fix a later one; so does a
    round in which not every process arrived within :data:`_RELEASE_S` (one may be inside a
    collective that needs those waiting): the waiting ones then train one more step.
    """

    def __init__(self, owner: SignalStop, store: Store, run: int, rank: int, world_size: int) -> None:
        super().__init__(name="torchplug-signal-agreement", daemon=True)
        self.owner = owner
        self.store = store
        self.prefix = f"signals/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{run}/"
        self.rank = rank
        self.world_size = world_size
        self.signum: int | None = None
        self._local: int | None = None  # a signal this process received, not yet told to the others
        self._done = threading.Event()
        self._released = False  # rank 0's fit ended while stopping: no more waiting

    def _key(self, name: str) -> str:
        return self.prefix + name

    def request(self, signum: int) -> None:
        """Called by the signal handler: the thread tells the others (no store call inside a handler)."""
        self._local = signum

    def finish(self) -> None:
        """End the thread (``fit`` is over here); on rank 0, release anyone still waiting."""
        self._done.set()
        self.join(timeout=5)
        if self.rank == 0 and self.signum is not None:
            try:
                if not self.store.check([self._key("final")]):
                    self.store.set(self._key("final"), "-1")
            except Exception:  # the others are gone already
                pass

    # -- the main thread, at a boundary ---------------------------------------------------------------

    def stop_here(self, position: int) -> bool:
        """Report ``position``; True when every process stops at it (after waiting until all are there)."""
        if self._released:
            return False
        self.store.set(self._key(f"at/{self.rank}"), str(position))
        announced: int | None = None
        while True:
            final = self._read("final")
            if final == -1:
                self._released = True
                return False
            target = self._read("target")
            if target is None or position != target:
                return False  # not there yet, or passed it before it was fixed: rank 0 fixes a later one
            if final == target:
                return True
            if announced != target:
                self.store.set(self._key(f"waiting/{self.rank}"), str(target))
                announced = target
            time.sleep(_POLL_S / 2)

    def _read(self, name: str) -> int | None:
        key = self._key(name)
        return int(self.store.get(key)) if self.store.check([key]) else None

    # -- the thread ---------------------------------------------------------------------------------

    @override
    def run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # the store is gone (a process exited): the run ends by other means
            log.debug("signal agreement ended: %r", exc)

    def _watch(self) -> None:
        store, request = self.store, self._key("request")
        while not self._done.wait(_POLL_S):
            if self._local is not None:
                store.set(request, str(self._local))
                self._local = None
            if store.check([request]):
                self.signum = int(store.get(request))
                self.owner.hold = True
                if self.rank == 0:
                    self._coordinate()
                return

    def _coordinate(self) -> None:
        """Rank 0: fix a boundary nobody has passed, move it on when needed, and say when everyone waits there."""
        target: int | None = None
        fixed_at = 0.0
        ranks = range(self.world_size)
        while not self._done.wait(_POLL_S / 2):
            known = [p for p in (self._read(f"at/{rank}") for rank in ranks) if p is not None]
            if not known:
                continue
            if target is None or max(known) > target:  # the first target, or someone passed it before it was fixed
                target, fixed_at = self._fix(max(known) + 1)
                continue
            waiting = [self._read(f"waiting/{rank}") == target for rank in ranks]
            if all(waiting):
                self.store.set(self._key("final"), str(target))
                return
            if any(waiting) and time.monotonic() - fixed_at > _RELEASE_S:
                # The others may be inside a collective that needs those waiting: one more step for everyone.
                target, fixed_at = self._fix(target + 1)

    def _fix(self, target: int) -> tuple[int, float]:
        self.store.set(self._key("target"), str(target))
        return target, time.monotonic()


#: Seconds rank 0 waits for every process to arrive at the boundary it fixed before moving it on.
_RELEASE_S: Final = 2.0
