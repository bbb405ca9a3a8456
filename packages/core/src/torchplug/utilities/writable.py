"""Whether a run can write where it was told to, found before its first step rather than at its first save.

One check for every directory a run writes (``core fit``'s ``default_root_dir``, a logger's
directory, ``ModelCheckpoint``'s ``dirpath``): a temporary file is really created and removed in
the directory, or in its nearest existing parent when it does not exist yet. Permission bits are
not read, since they do not tell the truth everywhere (root writes through them; an immutable
directory, a read-only mount or a full quota refuses whoever asks).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Protocol

from torchplug._errors import MisconfigurationError

__all__ = ["refuse_unwritable", "unwritable"]


class _Broadcaster(Protocol):
    """What :func:`refuse_unwritable` asks of a strategy."""

    @property
    def is_global_zero(self) -> bool: ...

    def broadcast(self, obj: Any, src: int = 0) -> Any: ...


def unwritable(directory: str) -> str | None:
    """Why files cannot be written in the local ``directory``, or None when they can (or it is remote).

    A missing directory is judged by its nearest existing parent, where it would be created; nothing
    is created but a temporary file, removed at once. A remote URL (``s3://``, ``memory://``) is not
    checked: its first write reports its own error.

    Args:
        directory: A local path or ``file://`` URL.

    Returns:
        The reason in words (``"PermissionError: Operation not permitted"``), or None.
    """
    if "://" in directory and not directory.startswith("file://"):
        return None
    target = os.path.abspath(directory.removeprefix("file://"))
    existing = target
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    parent = "" if existing == target else f" (in {existing}, its nearest existing parent)"
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a directory"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}{parent}"
    return None


def refuse_unwritable(directory: str, what: str, strategy: _Broadcaster) -> None:
    """Raise on every process when global rank 0, the rank that writes, cannot write in ``directory``.

    Called when a run starts, on every process: rank 0 tries, the others learn its answer (one
    broadcast), so that all of them stop with the same error instead of waiting for rank 0.

    Args:
        directory: The local path or URL the run will write in.
        what: Who writes there, in the user's words (``"ModelCheckpoint(dirpath='ckpts')"``).
        strategy: The run's strategy (its rank and its broadcast).

    Raises:
        MisconfigurationError: Files cannot be written there; the message names the directory and why.
    """
    problem = unwritable(directory) if strategy.is_global_zero else None
    problem = strategy.broadcast(problem)
    if problem is not None:
        raise MisconfigurationError(
            f"{what}: cannot write in {directory!r} ({problem}). Nothing was trained. "
            "Hint: give a directory you can write to."
        )
