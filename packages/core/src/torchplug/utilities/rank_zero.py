"""Printing and warning once, from global rank 0 only."""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

__all__ = ["log", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

#: The logger of torchplug's own messages.
log = logging.getLogger("torchplug")


def _show_info_messages() -> None:
    """Make torchplug's info messages visible, as Lightning does with its own logger.

    Python shows only warnings of a logger nobody configured, and torchplug says at the info level
    what it decided for the user (a time limit reached, a scheduler replaced, the checkpoint a resume
    chose). So the ``torchplug`` logger gets the INFO level unless one was set, and, when the
    program has configured no logging at all (no handler on the root logger), a handler of its own
    that writes to stderr. A program that configures logging (``logging.basicConfig``...) before
    importing the Trainer receives the messages through its handlers instead; silence them with
    ``logging.getLogger("torchplug").setLevel(logging.WARNING)``.
    """
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().hasHandlers():
        log.addHandler(logging.StreamHandler())
        log.propagate = False


_show_info_messages()


def _rank() -> int:
    """The first rank a launcher or scheduler exported; a value that is not a rank is refused, naming it."""
    from torchplug.utilities.env_vars import env_int

    for key in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        rank = env_int(key, None, minimum=0)
        if rank is not None:
            return rank
    return 0


T = TypeVar("T")
D = TypeVar("D")


class _RankZero:
    """Runs a function on global rank 0 only: ``@rank_zero_only`` or ``rank_zero_only(fn, default=...)``.

    The wrapped function returns ``default`` (None unless given) on the other ranks. The rank is
    read when the function is called: the one the Trainer set (``rank_zero_only.rank``) once
    ranks are known, else the launcher's or scheduler's environment variables.

    Example:
        >>> @rank_zero_only
        ... def report(metrics):
        ...     print(metrics)
    """

    rank: int | None = None

    def is_zero(self) -> bool:
        """Whether this process is global rank 0."""
        return (self.rank if self.rank is not None else _rank()) == 0

    @overload
    def __call__(self, fn: Callable[..., T]) -> Callable[..., T | None]: ...

    @overload
    def __call__(self, fn: Callable[..., T], default: D) -> Callable[..., T | D]: ...

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., Any]:
        """Wrap ``fn`` to run on global rank 0 only; elsewhere the call returns ``default``."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs) if self.is_zero() else default

        return wrapped


#: ``@rank_zero_only`` runs a function on global rank 0 only; ``rank_zero_only.rank`` is that process's rank.
rank_zero_only = _RankZero()


def rank_zero_warn(message: str, stacklevel: int = 2, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` on global rank 0 only (``stacklevel`` second, as in Lightning's)."""
    if rank_zero_only.is_zero():
        warnings.warn(message, category, stacklevel=stacklevel + 1)


def rank_zero_info(message: str, *args: Any) -> None:
    """Log an info message on global rank 0 only."""
    if rank_zero_only.is_zero():
        log.info(message, *args)
