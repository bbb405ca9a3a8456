"""The Callback base class: code that hooks into the Trainer's loops without touching the model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug.utilities.annotations import RealSignature

if TYPE_CHECKING:
    import torch

    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["Callback"]


class Callback:
    """Override the hooks you need; the Trainer calls only the ones a callback overrides.

    Every hook gets the Trainer and the Module, named ``trainer`` and ``pl_module`` as in Lightning
    (so ``super().on_fit_start(trainer=trainer, pl_module=pl_module)`` works), then the hook's own
    arguments; ``setup``/``teardown`` get ``stage=`` by keyword, as Lightning passes it. The batch
    and epoch hooks of training, validation and test may log through the module, as in Lightning
    (``pl_module.log("name", value)``). Callbacks with state implement
    :meth:`state_dict`/:meth:`load_state_dict`; it is saved in checkpoints under :attr:`state_key`.
    """

    #: ``inspect.signature`` of torchplug's subclasses shows real types (utilities/annotations.py).
    __signature__ = RealSignature()

    @property
    def state_key(self) -> str:
        """The key of this callback's state in checkpoints; make it unique when several instances exist."""
        return type(self).__qualname__

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (plain data and tensors)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Called at the start of fit, validate, test or predict, in every process."""

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Called at the end of fit, validate, test or predict, in every process."""

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when fit starts."""

    def on_fit_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when fit ends."""

    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called before the sanity-check validation batches."""

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called after the sanity-check validation batches."""

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called before the first training epoch."""

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called after the last training epoch."""

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the start of every training epoch."""

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the end of every training epoch, after its validation."""

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        """Called before each training batch."""

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Called after each training batch (after the optimizer step, when one was due)."""

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a validation run starts."""

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a validation run ends (its metrics are in ``trainer.callback_metrics``)."""

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the start of a validation epoch."""

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the end of a validation epoch."""

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before each validation batch."""

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each validation batch."""

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a test run starts."""

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a test run ends."""

    def on_test_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the start of the test epoch."""

    def on_test_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the end of the test epoch."""

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before each test batch."""

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each test batch."""

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a predict run starts."""

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called when a predict run ends."""

    def on_predict_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the start of the predict epoch."""

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Called at the end of the predict epoch."""

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called before each predict batch."""

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each predict batch."""

    def on_before_backward(self, trainer: Trainer, pl_module: Module, loss: torch.Tensor) -> None:
        """Called before backward."""

    def on_after_backward(self, trainer: Trainer, pl_module: Module) -> None:
        """Called after backward, before the optimizer step."""

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: Module, optimizer: torch.optim.Optimizer) -> None:
        """Called before each optimizer step, after gradient clipping."""

    def on_before_zero_grad(self, trainer: Trainer, pl_module: Module, optimizer: torch.optim.Optimizer) -> None:
        """Called before the gradients are reset."""

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        """Called when a run fails (or is interrupted), before teardown."""

    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """Called while a checkpoint is assembled; may add entries (plain data and tensors only)."""

    def on_load_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """Called while a checkpoint is restored."""
