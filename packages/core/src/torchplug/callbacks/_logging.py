"""What the logging callbacks share: the loggers' step, and whether the current step is a logging step."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["logger_step", "should_update_logs"]


def logger_step(trainer: Trainer) -> int:
    """The step the loggers receive now: training batches that ended with an optimizer step (the first is 0)."""
    return trainer.fit_loop.progress.stepped_batches


def should_update_logs(trainer: Trainer) -> bool:
    """Whether step metrics are sent to the loggers at this step (every ``log_every_n_steps``, and on a stop).

    The same rule as the Trainer's own step metrics, so that a callback's values land on the same
    rows; it holds before and after the batch (``+ 1``: the step about to be counted).
    """
    return (logger_step(trainer) + 1) % trainer.log_every_n_steps == 0 or trainer.should_stop
