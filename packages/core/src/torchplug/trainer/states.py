"""What the Trainer is doing now, and how far it has got (the loop position saved in checkpoints)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ExitRun", "FitProgress", "RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]


class ExitRun(Exception):
    """Raised inside ``fit`` (from a callback's ``on_fit_start``) to end the run at once, as a success.

    The Trainer tears down and returns from ``fit`` without training, without calling the
    ``on_exception`` hooks and without telling the loggers that the run failed. The tuner's
    finders raise it when :class:`torchplug.tuner.Tuner` runs them in a fit of their own.
    """


class TrainerFn(str, enum.Enum):
    """The user-facing call in progress."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(str, enum.Enum):
    """The loop running now (fit alternates between training, validating and the sanity check)."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def dataloader_prefix(self) -> str:
        """The prefix of the dataloader hook (``val`` for both validation stages)."""
        return "val" if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING) else self.value

    @property
    def evaluating(self) -> bool:
        """Whether this stage evaluates a model: validating or testing (not the sanity check)."""
        return self in (RunningStage.VALIDATING, RunningStage.TESTING)


class TrainerStatus(str, enum.Enum):
    """Where the Trainer is in its life cycle."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        """Whether the last call is over: finished, or interrupted (by an exception or a signal)."""
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


@dataclass
class TrainerState:
    """The status, call and stage of the Trainer (``trainer.state``), Lightning's fields in Lightning's order.

    Attributes:
        status: Where the Trainer is in its life cycle (initializing, running, finished, interrupted).
        fn: The call in progress or last made (``fit``, ``validate``, ``test``, ``predict``), None before any.
        stage: The loop running now (None between calls).
    """

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        """Whether the last call ran to its end (not interrupted)."""
        return self.status is TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        """Whether the last call is over, finished or interrupted."""
        return self.status.stopped


@dataclass
class FitProgress:
    """The training loop's position, precise enough to resume a run bit for bit.

    Attributes:
        epoch: The epoch in progress (or the next one, once ``epoch_finished``).
        global_step: Optimizer steps taken.
        batches_done: Training batches finished in this epoch (forward, backward, and step if due).
        tail_done: Whether the work after the last finished batch (validation if due, stop checks) ran.
        epoch_finished: Whether this epoch's end-of-epoch work ran (then ``epoch`` starts next).
        epoch_rng: The random states captured right before this epoch's dataloader iterator was
            created, so a resumed run recreates the same shuffling.
        total_batches: Training batches finished over all epochs.
        stepped_batches: Training batches that ended with an optimizer step, over all epochs: the step at
            which metrics are logged (Lightning's ``_batches_that_stepped``).
        should_stop: Whether a callback (EarlyStopping) asked training to stop.
    """

    epoch: int = 0
    global_step: int = 0
    batches_done: int = 0
    tail_done: bool = True
    epoch_finished: bool = False
    epoch_rng: dict[str, Any] | None = field(default=None, repr=False)
    total_batches: int = 0
    stepped_batches: int = 0
    should_stop: bool = False

    def state_dict(self) -> dict[str, Any]:
        """Plain data for the checkpoint (``weights_only``-safe); shallow: nothing here is mutated in place."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, value)
