"""The types of the public hooks and of the scheduler config: ``STEP_OUTPUT``, ``LRSchedulerConfig``...

Lightning code imports them from here (``from torchplug.utilities.types import STEP_OUTPUT``) to
annotate its hooks; the Trainer reads ``configure_optimizers``' schedulers into
:class:`LRSchedulerConfig` objects (``trainer.lr_scheduler_configs``).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "LRSchedulerConfig",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
]

#: What ``training_step`` (and the other steps) may return: a loss, a dict holding ``"loss"``, or None.
STEP_OUTPUT = Tensor | Mapping[str, Any] | None

#: What ``train_dataloader`` returns: a DataLoader, or any iterable or collection of iterables.
TRAIN_DATALOADERS = Any

#: What ``val_dataloader``, ``test_dataloader`` and ``predict_dataloader`` return.
EVAL_DATALOADERS = Any

#: A learning-rate scheduler object the Trainer steps.
LRSchedulerTypeUnion = torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau

#: What ``configure_optimizers`` may return (every form :func:`~torchplug.trainer.optimizers.parse_optimizers` reads).
OptimizerLRScheduler = (
    Optimizer
    | Sequence[Optimizer]
    | tuple[Sequence[Optimizer], Sequence[Any]]
    | Mapping[str, Any]
    | Sequence[Mapping[str, Any]]
    | None
)


@dataclass
class LRSchedulerConfig:
    """A scheduler and when the Trainer steps it (one per scheduler ``configure_optimizers`` returned).

    The fields are the keys of the ``"lr_scheduler"`` dict of ``configure_optimizers``, in
    Lightning's order, so that positional construction means the same.

    Attributes:
        scheduler: The scheduler object (a ``torch.optim.lr_scheduler`` one, or anything with ``step()``).
        name: Shown by LearningRateMonitor (default: ``lr-<Optimizer class>``).
        interval: ``"epoch"`` (after each epoch's validation) or ``"step"`` (after each optimizer step).
        frequency: Step it every this many intervals.
        reduce_on_plateau: Whether its ``step`` takes the value of ``monitor`` (None, the default: whether
            it is a ``ReduceLROnPlateau``). Set True for another scheduler that steps on a metric.
        monitor: The metric passed to a ``reduce_on_plateau`` scheduler's ``step``.
        strict: Raise when ``monitor`` was not logged (otherwise skip the step with a warning).
    """

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool | None = None
    monitor: str | None = None
    strict: bool = True

    def __post_init__(self) -> None:
        plateau = self.reduce_on_plateau
        if plateau is None:
            plateau = isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        self.reduce_on_plateau = bool(plateau)  # the loops compare it with `is`
