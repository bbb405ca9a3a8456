"""Printing and warning once, from global rank 0 only."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

__all__ = ["log", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]

#: The logger of torchplug's own messages.
log = logging.getLogger("torchplug")


def _rank() -> int:
    # The launchers and schedulers export one of these before our code runs in a worker.
    for key in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key in os.environ:
            try:
                return int(os.environ[key])
            except ValueError:
                continue
    return 0


class _RankZero:
    """The rank that may print: set by the strategy once ranks are known, else read from the environment."""

    rank: int | None = None

    def is_zero(self) -> bool:
        return (self.rank if self.rank is not None else _rank()) == 0


rank_zero_only = _RankZero()


def rank_zero_warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` on global rank 0 only."""
    if rank_zero_only.is_zero():
        warnings.warn(message, category, stacklevel=stacklevel + 1)


def rank_zero_info(message: str, *args: Any) -> None:
    """Log an info message on global rank 0 only."""
    if rank_zero_only.is_zero():
        log.info(message, *args)
