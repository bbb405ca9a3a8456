"""The Launcher base class: how a strategy starts the processes it needs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = ["Launcher"]


class Launcher(ABC):
    """Starts the local processes of a multi-process strategy and runs a function in each.

    The Trainer calls ``launcher.launch(fn, *args)`` instead of ``fn(*args)`` when the strategy
    has a launcher. A launcher that re-runs the user's script (as ``torchrun`` does) returns the
    result of rank 0 in the original process; one that spawns workers returns what the main
    worker sent back.
    """

    @property
    @abstractmethod
    def is_interactive_compatible(self) -> bool:
        """Whether it works inside a notebook or REPL, where there is no script to re-run."""

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the processes, run ``function(*args, **kwargs)`` in each, and return rank 0's result.

        If any process fails, the others must be stopped within a bounded time and the error
        raised here, naming the rank that failed.
        """

    def kill(self, signum: int) -> None:
        """Forward ``signum`` to every process this launcher started. Default: nothing started."""
