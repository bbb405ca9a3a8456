"""``GradientAccumulationScheduler``: change ``accumulate_grad_batches`` at given epochs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Callback):
    """Accumulate gradients over a number of batches that changes with the epoch.

    ``scheduling={0: 8, 4: 4, 8: 1}``: 8 batches per optimizer step in epochs 0-3, 4 in epochs
    4-7, then 1. Epochs before the first key accumulate 1 batch. The value is set on
    ``trainer.accumulate_grad_batches`` at the start of each epoch (and of a resumed epoch), and
    the training loop reads it once per epoch, so the schedule costs nothing per step.

    Example:
        >>> Trainer(callbacks=[GradientAccumulationScheduler(scheduling={0: 8, 4: 4, 8: 1})])

    Args:
        scheduling: Epoch (0-based) to the number of batches to accumulate from that epoch on.

    Raises:
        MisconfigurationError: An empty schedule, a key that is not an int >= 0 or a value that is
            not an int >= 1; at the start of ``fit``: ``Trainer(accumulate_grad_batches=...)`` set
            too, manual optimization, or a strategy that accumulates on its own.
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not scheduling:
            raise MisconfigurationError("GradientAccumulationScheduler(scheduling={}): give at least one epoch.")
        for epoch, batches in scheduling.items():
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise MisconfigurationError(
                    f"GradientAccumulationScheduler(scheduling=...): the epoch {epoch!r} is not an int >= 0."
                )
            if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
                raise MisconfigurationError(
                    f"GradientAccumulationScheduler(scheduling=...): epoch {epoch} accumulates {batches!r} batches; "
                    "give an int >= 1."
                )
        self.scheduling = dict(sorted(scheduling.items()))
        if 0 not in self.scheduling:
            self.scheduling = {0: 1, **self.scheduling}
        self._epochs = sorted(self.scheduling)
        self._last_set: int | None = None

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether any epoch accumulates more than one batch."""
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The number of batches accumulated in ``epoch``."""
        accumulate = 1
        for start in self._epochs:
            if epoch >= start:
                accumulate = self.scheduling[start]
        return accumulate

    @override
    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """Refuse what cannot be combined with a schedule, and set the value of the epoch training starts in."""
        given = trainer.accumulate_grad_batches
        if given != 1 and given != self._last_set:  # the user's own value, not the one this schedule set last
            raise MisconfigurationError(
                f"Trainer(accumulate_grad_batches={given}) and a GradientAccumulationScheduler were both given. "
                "Hint: keep one; put the Trainer's value in the schedule for epoch 0."
            )
        if self.going_to_accumulate_grad_batches():
            if not module.automatic_optimization:
                raise MisconfigurationError(
                    "GradientAccumulationScheduler works with automatic optimization only; in manual optimization "
                    "accumulate in training_step yourself."
                )
            if trainer.strategy.handles_gradient_accumulation:
                raise MisconfigurationError(
                    f"The strategy {type(trainer.strategy).__name__} accumulates gradients itself; give its own "
                    "accumulation setting instead of a GradientAccumulationScheduler."
                )
        self._set(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Set ``trainer.accumulate_grad_batches`` for this epoch."""
        self._set(trainer)

    def _set(self, trainer: Trainer) -> None:
        self._last_set = self.get_accumulate_grad_batches(trainer.current_epoch)
        trainer.accumulate_grad_batches = self._last_set

    def __repr__(self) -> str:
        return f"GradientAccumulationScheduler(scheduling={self.scheduling})"
