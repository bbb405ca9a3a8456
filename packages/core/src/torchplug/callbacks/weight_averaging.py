"""``WeightAveraging`` and ``EMAWeightAveraging``: keep an average of the weights, use it to validate and in the end."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from typing_extensions import override

from torchplug.callbacks._copy import copy_module, refuse_sharded
from torchplug.callbacks.callback import Callback
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["EMAWeightAveraging", "WeightAveraging"]


class WeightAveraging(Callback):
    """Average the weights during training (``torch.optim.swa_utils.AveragedModel``), by default after every step.

    While validating, the model holds the averaged weights (swapped in at the start of each
    validation epoch and out at its end); when training ends they are copied into the model for
    good. Checkpoints hold the averaged weights as ``state_dict`` (so ``load_from_checkpoint``
    gives the averaged model) and the current ones as ``current_model_state``, from which a
    resumed fit continues exactly.

    Override :meth:`should_update` to choose when to update. Without an averaging function the
    average is equally weighted (SWA); :class:`EMAWeightAveraging` keeps an exponential moving
    average.

    Example:
        >>> Trainer(callbacks=[WeightAveraging()])   # SWA of every step's weights

    Args:
        device: Where the averaged copy lives (default: with the model; ``"cpu"`` saves device memory).
        use_buffers: Average the buffers too (batch-norm statistics...); False averages only the
            parameters and leaves updating the buffers to you (``torch.optim.swa_utils.update_bn``).
        **kwargs: Passed to ``AveragedModel`` (``avg_fn`` or ``multi_avg_fn``).
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._latest_update_step = 0
        self._latest_update_epoch = -1

    @property
    def average_model(self) -> AveragedModel | None:
        """The averaged copy (``average_model.module`` holds its weights), from the start of ``fit`` on."""
        return self._average_model

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` or epoch ``epoch_idx`` (0-based).

        Called with one of the two; the default updates after every optimizer step.
        """
        return step_idx is not None

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Make the averaged copy of the model, as it is on its device (layers of ``configure_model`` included)."""
        refuse_sharded(module, type(self).__name__)
        device = self._device if self._device is not None else trainer.strategy.root_device
        self._average_model = AveragedModel(
            copy_module(module, trainer), device=device, use_buffers=self._use_buffers, **self._kwargs
        )

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Update the average after an optimizer step, when :meth:`should_update` says so."""
        step = trainer.global_step
        if step > self._latest_update_step and self.should_update(step_idx=step - 1):
            assert self._average_model is not None
            self._average_model.update_parameters(module)
            self._latest_update_step = step

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Update the average after an epoch, when :meth:`should_update` says so."""
        epoch = trainer.current_epoch
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            assert self._average_model is not None
            self._average_model.update_parameters(module)
            self._latest_update_epoch = epoch

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Copy the averaged weights into the model."""
        if self._average_model is not None:
            for average, current in _tensors(self._average_model.module, module):
                current.data.copy_(average.data)

    @override
    def on_validation_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Validate the averaged weights: swap them into the model."""
        if self._average_model is not None and not trainer.sanity_checking:
            self._swap(module)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Swap the current weights back for training."""
        if self._average_model is not None and not trainer.sanity_checking:
            self._swap(module)

    def _swap(self, module: Module) -> None:
        assert self._average_model is not None
        for average, current in _tensors(self._average_model.module, module):
            saved = average.data.clone()
            average.data.copy_(current.data)
            current.data.copy_(saved)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The step of the last update (the averaged weights travel in the checkpoint's ``state_dict``)."""
        return {"latest_update_step": self._latest_update_step, "latest_update_epoch": self._latest_update_epoch}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the step of the last update."""
        self._latest_update_step = state_dict["latest_update_step"]
        self._latest_update_epoch = state_dict.get("latest_update_epoch", -1)

    @override
    def on_save_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Put the averaged weights in ``state_dict``, the current ones in ``current_model_state``."""
        if self._average_model is None:
            rank_zero_info(
                f"{type(self).__name__}: a checkpoint saved outside fit holds the model as it is (after fit: the "
                "averaged weights)."
            )
            return
        average = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        checkpoint["state_dict"] = {k.removeprefix("module."): v for k, v in average.items() if k.startswith("module.")}
        checkpoint["averaging_state"] = {k: v for k, v in average.items() if not k.startswith("module.")}

    @override
    def on_load_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Restore the average and the current weights from a checkpoint this callback wrote."""
        if self._average_model is None:
            return
        if "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            average = {f"module.{k}": v for k, v in checkpoint["state_dict"].items()}
            self._average_model.load_state_dict({**average, **checkpoint["averaging_state"]})
            trainer.strategy.load_module_state_dict(checkpoint["current_model_state"])
        else:
            rank_zero_warn(
                f"{type(self).__name__}: the checkpoint was not written with weight averaging; the average starts "
                "from its weights."
            )
            self._average_model.module.load_state_dict(checkpoint["state_dict"], strict=False)


def _tensors(average: torch.nn.Module, current: torch.nn.Module) -> zip[tuple[torch.Tensor, torch.Tensor]]:
    return zip(
        itertools.chain(average.parameters(), average.buffers()),
        itertools.chain(current.parameters(), current.buffers()),
    )


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights: ``average = decay * average + (1 - decay) * weights``.

    Example:
        >>> Trainer(callbacks=[EMAWeightAveraging(decay=0.999, update_starting_at_step=1000)])

    Args:
        device: Where the averaged copy lives (default: with the model).
        use_buffers: Average the buffers too.
        decay: The weight of the old average at each update (0 < decay < 1).
        update_every_n_steps: Update after every n-th optimizer step (0: never after steps).
        update_starting_at_step: First optimizer step (0-based) that updates (None: from the start).
        update_starting_at_epoch: Also update at the end of each epoch from this one on (None: never).
        **kwargs: Passed to ``AveragedModel``.
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMAWeightAveraging(decay={decay!r}): give a number between 0 and 1.")
        super().__init__(device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay), **kwargs)
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    @override
    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Update after every ``update_every_n_steps``-th step from ``update_starting_at_step`` on.

        And after every epoch from ``update_starting_at_epoch`` on, when it is set.
        """
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        if epoch_idx is not None:
            return self.update_starting_at_epoch is not None and epoch_idx >= self.update_starting_at_epoch
        return False
