"""``Timer``: stop training after a given time, and measure the time each stage took."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.trainer.arguments import parse_duration
from torchplug.trainer.states import RunningStage
from torchplug.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["Timer", "parse_duration"]


class Timer(Callback):
    """Stop training once ``duration`` has passed, and time the training, validation and test loops.

    ``Trainer(max_time=...)`` adds one. The time limit is checked when training starts (a zero or
    used-up budget trains no step, as in Lightning), then after every training batch
    (``interval="step"``) or every epoch (``"epoch"``). Global rank 0's clock decides, for every
    process at once, so that DDP ranks never disagree about stopping. The training time survives
    a resume: the checkpoint stores it, and a resumed run stops when the total reaches ``duration``.

    Example:
        >>> timer = Timer(duration="00:12:00:00")          # 12 hours
        >>> Trainer(callbacks=[timer]).fit(model)
        >>> timer.time_elapsed("train"), timer.time_elapsed("validate")

    Args:
        duration: ``"DD:HH:MM:SS"``, a ``datetime.timedelta``, or a dict of its arguments
            (``{"hours": 12}``); None measures without stopping.
        interval: ``"step"`` or ``"epoch"``: when the limit is checked.
        verbose: Say so (on rank 0) when the limit stops training.

    Raises:
        MisconfigurationError: A duration or interval that cannot be understood.
    """

    def __init__(
        self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step", verbose: bool = True
    ) -> None:
        if interval not in ("step", "epoch"):
            raise MisconfigurationError(f"Timer(interval={interval!r}): choose 'step' or 'epoch'.")
        self._duration = None if duration is None else parse_duration(duration, "duration").total_seconds()
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[RunningStage, float | None] = dict.fromkeys(RunningStage)
        self._end_time: dict[RunningStage, float | None] = dict.fromkeys(RunningStage)
        self._offset = 0.0

    @property
    def duration(self) -> float | None:
        """The time limit in seconds (None: no limit)."""
        return self._duration

    def start_time(self, stage: str = RunningStage.TRAINING) -> float | None:
        """When ``stage`` (``"train"``, ``"validate"``, ``"test"``...) last started, on the monotonic clock."""
        return self._start_time[RunningStage(stage)]

    def end_time(self, stage: str = RunningStage.TRAINING) -> float | None:
        """When ``stage`` last ended, on the monotonic clock (None while it runs)."""
        return self._end_time[RunningStage(stage)]

    def time_elapsed(self, stage: str = RunningStage.TRAINING) -> float:
        """Seconds ``stage`` has run (training includes the time of the run it resumed from)."""
        stage = RunningStage(stage)
        start, end = self._start_time[stage], self._end_time[stage]
        offset = self._offset if stage is RunningStage.TRAINING else 0.0
        if start is None:
            return offset
        return (end if end is not None else time.monotonic()) - start + offset

    def time_remaining(self, stage: str = RunningStage.TRAINING) -> float | None:
        """Seconds left until ``duration`` (None without a limit)."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    def _start(self, stage: RunningStage) -> None:
        self._start_time[stage] = time.monotonic()
        self._end_time[stage] = None

    def _end(self, stage: RunningStage) -> None:
        self._end_time[stage] = time.monotonic()

    @override
    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """Start the training clock (and check the limit: a resumed run may have used it up)."""
        self._start(RunningStage.TRAINING)
        if self._duration is not None:
            self._check_time_remaining(trainer)

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the training clock."""
        self._end(RunningStage.TRAINING)

    @override
    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Start the validation clock."""
        self._start(RunningStage.VALIDATING)

    @override
    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the validation clock."""
        self._end(RunningStage.VALIDATING)

    @override
    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Start the test clock."""
        self._start(RunningStage.TESTING)

    @override
    def on_test_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the test clock."""
        self._end(RunningStage.TESTING)

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Check the limit at once (a resumed run may have used it up already)."""
        if self._duration is not None:
            self._check_time_remaining(trainer)

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Check the limit after every batch (``interval="step"``)."""
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Check the limit after every epoch (``interval="epoch"``)."""
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The time each stage has run, in seconds."""
        return {"time_elapsed": {stage.value: self.time_elapsed(stage) for stage in RunningStage}}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Count the training time of the checkpoint's run towards ``duration``."""
        self._offset = float(state_dict.get("time_elapsed", {}).get(RunningStage.TRAINING.value, 0.0))

    def _check_time_remaining(self, trainer: Trainer) -> None:
        assert self._duration is not None
        should_stop = self.time_elapsed() >= self._duration
        if trainer.world_size > 1:  # rank 0's clock decides for all, so no rank leaves the others waiting
            should_stop = trainer.strategy.broadcast(should_stop)
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed()))
            rank_zero_info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")

    def __repr__(self) -> str:
        return f"Timer(duration={self._duration}, interval={self._interval!r})"
