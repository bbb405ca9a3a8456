"""The Logger base class: where metrics and hyperparameters go."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

__all__ = ["Logger"]


class Logger(ABC):
    """Receives metrics and hyperparameters; the Trainer calls it from global rank 0 only."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The experiment's name."""

    @property
    @abstractmethod
    def version(self) -> str | int:
        """The run's version within the experiment."""

    @property
    def save_dir(self) -> str | None:
        """The root directory the logger writes under, if any."""
        return None

    @property
    def log_dir(self) -> str | None:
        """This run's directory (checkpoints go in ``<log_dir>/checkpoints`` by default), if any."""
        return None

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` (name to number) at ``step``."""

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Record the run's hyperparameters."""

    def save(self) -> None:
        """Flush what was recorded so far to storage."""

    def finalize(self, status: str) -> None:
        """Called once at the end of a run (``status``: ``"success"``, ``"failed"`` or ``"interrupted"``)."""
        self.save()
