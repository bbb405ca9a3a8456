"""Signal handlers that only take note: the preemption notice, and a SIGTERM held back until it is safe.

A signal handler runs between two bytecodes of whatever the main thread is doing, possibly in
the middle of ``torch.save`` or a collective, so a handler that checkpoints or runs ``scontrol``
itself can hang or tear checkpoints. Here the handler records the signal and returns; the
Trainer polls :attr:`SignalWatch.requested` at its next step boundary and does the work there,
in the normal flow of the program.

SIGTERM (what SLURM sends on ``scancel``, on preemption, at the time limit and to a job being
requeued) is handled the same way while fit runs, when its previous disposition was the default
(to end the process): it asks for a checkpoint at the next step boundary instead of killing the
process in the middle of a write, and :meth:`SignalWatch.uninstall` sends it again once the
previous disposition is back, so the process still ends as SLURM asked, only a little later.
SLURM's SIGKILL (``KillWait``/``GraceTime`` seconds after SIGTERM) remains the hard stop, and the
checkpoint IO writes atomically, so even then no torn file is left.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, Final

__all__ = ["SignalWatch", "parse_signal"]

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def parse_signal(value: int | str | signal.Signals, source: str = "requeue_signal") -> signal.Signals:
    """A signal from a ``signal.Signals``, a number, or a name with or without ``SIG`` (``"USR1"``).

    Raises:
        ValueError: Not a signal of this platform; the message names ``source`` and gives examples.
    """
    try:
        if isinstance(value, str):
            name = value.strip().upper()
            if name.isdigit():
                return signal.Signals(int(name))
            return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        return signal.Signals(value)
    except (KeyError, ValueError):
        raise ValueError(
            f"{source}={value!r} is not a signal on this platform. Give a name such as 'USR1' or 'SIGUSR2', "
            "or a number (the one in sbatch --signal=USR1@90)."
        ) from None


class SignalWatch:
    """Handlers that record which signals arrived, installed on the main thread and removed afterwards.

    Args:
        notify: Signals that ask for a checkpoint (the requeue signal). The previous Python handler,
            if any, is called too (chained); a default or ignored disposition is replaced.
        defer: Signals that ask for a checkpoint and are then delivered again by
            :meth:`uninstall` (SIGTERM), when their previous disposition was the default one.
            A previous Python handler is chained instead, right away; an ignored one stays ignored.
    """

    def __init__(self, notify: Iterable[signal.Signals], defer: Iterable[signal.Signals] = ()) -> None:
        self.notify: Final = tuple(notify)
        self.defer: Final = tuple(s for s in defer if s not in self.notify)
        self._received: dict[int, bool] = dict.fromkeys(map(int, (*self.notify, *self.defer)), False)
        self._previous: dict[int, _Handler] = {}

    @property
    def installed(self) -> bool:
        """Whether the handlers are in place."""
        return bool(self._previous)

    @property
    def requested(self) -> bool:
        """Whether any watched signal arrived since :meth:`install` (a flag read, for every step)."""
        return any(self._received.values())

    def received(self, signum: int) -> bool:
        """Whether ``signum`` arrived since :meth:`install`."""
        return self._received.get(int(signum), False)

    def install(self) -> bool:
        """Install the handlers. False (and nothing installed) off the main thread, where Python cannot."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in self._received:
            self._received[signum] = False
        for signum in self._received:
            self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back, then deliver again a deferred signal that arrived meanwhile."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in map(int, self.defer):
            if self._received[signum] and previous.get(signum) in (signal.SIG_DFL, None):
                signal.raise_signal(signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only flags, as a signal handler must: the work happens at the next step boundary.
        self._received[signum] = True
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
