"""``Timer``: stop training after a time budget (``Trainer(max_time=...)``), and measure each stage."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug.callbacks.callback import Callback
from torchplug.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["Timer", "parse_duration"]

_INTERVALS = ("step", "epoch")


def parse_duration(value: Any, what: str = "max_time") -> timedelta:
    """A duration from ``"DD:HH:MM:SS"``, a dict of ``timedelta`` arguments (``{"hours": 1}``), or a ``timedelta``.

    Raises:
        ValueError: Anything else, or a negative duration, naming ``what`` and the value.
    """
    duration: timedelta | None = None
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, str):
        parts = value.split(":")
        if len(parts) == 4 and all(p.strip().isdigit() for p in parts):
            days, hours, minutes, seconds = (int(p) for p in parts)
            duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        try:
            duration = timedelta(**value)
        except TypeError as exc:
            raise ValueError(
                f"{what}={value!r}: the dict's keys must be timedelta arguments (days, hours, minutes, seconds...): "
                f"{exc}"
            ) from exc
    if duration is None:
        raise ValueError(
            f'{what}={value!r} is not a duration: give "DD:HH:MM:SS" (for example "00:12:00:00"), a dict such as '
            '{"hours": 12}, or a datetime.timedelta.'
        )
    if duration.total_seconds() < 0:
        raise ValueError(f"{what}={value!r} is negative.")
    return duration


class Timer(Callback):
    """Stop training once ``duration`` has passed, checked after every batch (or every epoch), like any stop.

    ``Trainer(max_time=...)`` adds one. The time of each stage is measured too:
    ``time_elapsed("train")``. The elapsed training time is kept in checkpoints, so a resumed run
    counts on from it.

    Args:
        duration: The budget: ``"DD:HH:MM:SS"``, a dict (``{"hours": 1}``), a ``timedelta``, or None (only measure).
        interval: Check after every ``"step"`` (batch) or at every ``"epoch"`` end.
        verbose: Say when and why training stopped.
    """

    def __init__(self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step",
                 verbose: bool = True) -> None:  # fmt: skip
        if interval not in _INTERVALS:
            raise ValueError(f"Timer(interval={interval!r}): choose 'step' or 'epoch'.")
        self._duration = None if duration is None else parse_duration(duration).total_seconds()
        self._interval = interval
        self._verbose = verbose
        self._start: dict[str, float | None] = {"train": None, "validate": None, "test": None}
        self._end: dict[str, float | None] = dict(self._start)
        self._offset = 0.0

    @property
    def duration(self) -> float | None:
        """The budget in seconds (None: no limit)."""
        return self._duration

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage`` (``"train"``, ``"validate"`` or ``"test"``), training counting resumed time."""
        start, end = self._start[stage], self._end[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return offset + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of the budget (None without one)."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    @override
    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """Start the training clock."""
        self._start["train"], self._end["train"] = time.monotonic(), None

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the training clock."""
        self._end["train"] = time.monotonic()

    @override
    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Start the validation clock."""
        self._start["validate"], self._end["validate"] = time.monotonic(), None

    @override
    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the validation clock."""
        self._end["validate"] = time.monotonic()

    @override
    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Start the test clock."""
        self._start["test"], self._end["test"] = time.monotonic(), None

    @override
    def on_test_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the test clock."""
        self._end["test"] = time.monotonic()

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Stop when the budget is spent (``interval="step"``)."""
        if self._interval == "step" and self._duration is not None:
            self._check(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Stop when the budget is spent (``interval="epoch"``)."""
        if self._interval == "epoch" and self._duration is not None:
            self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        assert self._duration is not None
        over = self.time_elapsed("train") >= self._duration
        over = trainer.strategy.broadcast(over)  # rank 0's clock decides, so every process stops together
        if over and not trainer.should_stop:
            trainer.should_stop = True
            if self._verbose:
                rank_zero_info(
                    "Time limit reached: max_time=%s. Signaling the Trainer to stop.", timedelta(seconds=self._duration)
                )

    @override
    def state_dict(self) -> dict[str, Any]:
        """The elapsed training time (seconds)."""
        return {"time_elapsed": {"train": self.time_elapsed("train")}}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Count on from the saved training time."""
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))
