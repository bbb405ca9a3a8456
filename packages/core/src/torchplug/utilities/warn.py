"""Warning once per process, on global rank 0, pointing at the user's line rather than torchplug's."""

from __future__ import annotations

import sys
import warnings

from torchplug.utilities.env_vars import env_int
from torchplug.utilities.rank_zero import rank_zero_only

__all__ = ["reset_warned", "warn_once"]

# The messages already warned in this process.
_WARNED: set[str] = set()


def warn_once(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` the first time this process asks, on global rank 0 only.

    The warning is attributed to the first caller outside torchplug (the user's ``Trainer(...)``).
    A process whose ``LOCAL_RANK`` is not 0 (a rank a launcher started, before the strategy knows
    its global rank) is not rank 0 either.
    """
    if message in _WARNED or not rank_zero_only.is_zero() or env_int("LOCAL_RANK", 0, minimum=0) != 0:
        return
    _WARNED.add(message)
    warnings.warn(message, category, stacklevel=_outside_torchplug())


def reset_warned() -> None:
    """Forget what was warned, as in a fresh process (for tests)."""
    _WARNED.clear()


def _outside_torchplug() -> int:
    """The ``stacklevel`` of ``warn_once``'s ``warnings.warn`` that points past every torchplug frame."""
    frame = sys._getframe(1)  # warn_once's frame: stacklevel 1
    level = 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith("torchplug"):
        frame = frame.f_back
        level += 1
    return level
