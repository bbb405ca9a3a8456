"""``BasePredictionWriter``: write predictions to disk as they are made, or all at the end of ``predict``."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["BasePredictionWriter", "WriteInterval"]


class WriteInterval(str, enum.Enum):
    """When a :class:`BasePredictionWriter` writes."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        """Whether :meth:`BasePredictionWriter.write_on_batch_end` is called."""
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        """Whether :meth:`BasePredictionWriter.write_on_epoch_end` is called."""
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Subclass it and implement how predictions are written; the Trainer hands them over with their indices.

    ``batch_indices`` are the dataset indices of the samples in each batch, so that predictions
    written by several processes (each predicts its own shard under DDP, no sample twice) can be
    put back in dataset order. While a writer is attached, ``trainer.predict_loop`` records them;
    with ``write_interval="epoch"`` the predictions are kept for :meth:`write_on_epoch_end` even
    when ``trainer.predict(..., return_predictions=False)``.

    Example::

        class Writer(BasePredictionWriter):
            def __init__(self, directory):
                super().__init__(write_interval="epoch")
                self.directory = directory

            def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
                rank = trainer.global_rank
                torch.save(predictions, f"{self.directory}/predictions_{rank}.pt")
                torch.save(batch_indices, f"{self.directory}/batch_indices_{rank}.pt")

        Trainer(strategy="ddp", devices=2, callbacks=[Writer("out")]).predict(model, loader, return_predictions=False)

    Args:
        write_interval: ``"batch"`` (:meth:`write_on_batch_end` after each batch), ``"epoch"``
            (:meth:`write_on_epoch_end` once at the end) or ``"batch_and_epoch"`` (both).

    Raises:
        MisconfigurationError: Another ``write_interval``.
    """

    def __init__(self, write_interval: str = "batch") -> None:
        choices = [i.value for i in WriteInterval]
        if write_interval not in choices:
            raise MisconfigurationError(
                f"BasePredictionWriter(write_interval={write_interval!r}): choose one of {', '.join(choices)}."
            )
        self.interval = WriteInterval(write_interval)

    def write_on_batch_end(
        self,
        trainer: Trainer,
        module: Module,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Write one batch's ``prediction`` (``batch_indices``: its samples' dataset indices, None if unknown)."""
        raise NotImplementedError(
            f"{type(self).__name__} writes at write_interval={self.interval.value!r} but does not implement "
            "write_on_batch_end()."
        )

    def write_on_epoch_end(
        self, trainer: Trainer, module: Module, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Write all predictions at the end (a list of batches, or one per dataloader; indices per dataloader)."""
        raise NotImplementedError(
            f"{type(self).__name__} writes at write_interval={self.interval.value!r} but does not implement "
            "write_on_epoch_end()."
        )

    @override
    def on_predict_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Hand the batch's prediction to :meth:`write_on_batch_end`."""
        if self.interval.on_batch:
            indices = trainer.predict_loop.current_batch_indices
            self.write_on_batch_end(trainer, module, outputs, indices, batch, batch_idx, dataloader_idx)

    @override
    def on_predict_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Hand every prediction to :meth:`write_on_epoch_end`."""
        if self.interval.on_epoch:
            loop = trainer.predict_loop
            self.write_on_epoch_end(trainer, module, loop.predictions, loop.epoch_batch_indices)
