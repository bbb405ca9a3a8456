"""``StochasticWeightAveraging``: average the weights of the last epochs, with the SWA learning-rate schedule."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch.optim.swa_utils import SWALR
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks._copy import copy_module, refuse_sharded
from torchplug.callbacks.callback import Callback
from torchplug.loops.optimization import accepts_batch_idx
from torchplug.trainer.data import batch_transfer
from torchplug.trainer.optimizers import LRSchedulerConfig
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["StochasticWeightAveraging"]

AverageFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
_BatchNorm = torch.nn.modules.batchnorm._BatchNorm


class StochasticWeightAveraging(Callback):
    """Stochastic Weight Averaging (Izmailov et al., 2018): average the weights over the last epochs of training.

    From epoch ``swa_start`` on, the optimizer's learning rate anneals to ``swa_lrs`` over
    ``annealing_epochs`` (``torch.optim.swa_utils.SWALR``, replacing the model's scheduler) and
    the weights are averaged once per epoch, at its start, as Lightning does. When training ends
    after the last epoch, the model receives the averaged weights; a model with batch
    normalization then gets its running statistics recomputed in one pass over the training data
    (averaged over the processes under DDP); training that stops earlier (early stopping,
    ``max_steps``) leaves the model its own weights, with a warning. Its state (the average, the
    SWA schedule) is saved in checkpoints, so a resumed run continues the average.

    Example:
        >>> Trainer(max_epochs=20, callbacks=[StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=15)])

    Args:
        swa_lrs: The SWA learning rate: one for every parameter group, or a list with one per group.
        swa_epoch_start: The epoch SWA starts in: an int (1-based, as in Lightning: 15 starts in
            the 15th epoch) or a float fraction of ``max_epochs``. A start after the last epoch
            averages nothing, with a warning when ``fit`` starts.
        annealing_epochs: Epochs over which the learning rate anneals to ``swa_lrs`` (an int >= 0).
        annealing_strategy: ``"cos"`` or ``"linear"``.
        avg_fn: ``avg_fn(averaged, current, num_averaged)`` returning the new average (default:
            the equally weighted running mean).
        device: Where the averaged copy lives (``"cpu"`` by default; None: with the model).

    Raises:
        MisconfigurationError: An argument out of range; at the start of ``fit``, several
            optimizers or schedulers, a float ``swa_epoch_start`` with ``max_epochs=-1``, or sharded
            parameters.
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AverageFunction | None = None,
        device: torch.device | str | None = torch.device("cpu"),  # noqa: B008  (a constant, as in Lightning)
    ) -> None:
        if isinstance(swa_epoch_start, bool) or not isinstance(swa_epoch_start, (int, float)):
            raise MisconfigurationError(
                f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start!r}): give a number."
            )
        if isinstance(swa_epoch_start, int) and swa_epoch_start < 1:
            raise MisconfigurationError(
                f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start}): an int epoch is 1-based, give >= 1."
            )
        if isinstance(swa_epoch_start, float) and not 0.0 <= swa_epoch_start <= 1.0:
            raise MisconfigurationError(
                f"StochasticWeightAveraging(swa_epoch_start={swa_epoch_start}): a float is a fraction of max_epochs, "
                "between 0.0 and 1.0."
            )
        lrs = swa_lrs if isinstance(swa_lrs, list) else [swa_lrs]
        if not lrs or any(isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0 for lr in lrs):
            raise MisconfigurationError(
                f"StochasticWeightAveraging(swa_lrs={swa_lrs!r}): give a positive float, or a list of them."
            )
        if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 0:
            raise MisconfigurationError(
                f"StochasticWeightAveraging(annealing_epochs={annealing_epochs!r}) is not valid: give an int >= 0, the "
                "epochs over which the learning rate anneals to swa_lrs. Hint: annealing_epochs=10."
            )
        if annealing_strategy not in ("cos", "linear"):
            raise MisconfigurationError(
                f"StochasticWeightAveraging(annealing_strategy={annealing_strategy!r}): choose 'cos' or 'linear'."
            )
        if avg_fn is not None and not callable(avg_fn):
            raise MisconfigurationError(f"StochasticWeightAveraging(avg_fn={avg_fn!r}): give a function.")
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn: AverageFunction = avg_fn or self.avg_fn
        self._device = torch.device(device) if isinstance(device, str) else device
        self._average_model: torch.nn.Module | None = None
        self._initialized = False
        self._swa_scheduler: Any = None
        self._scheduler_state: dict[str, Any] | None = None
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._max_epochs = -1
        self._contains_batch_norm = False
        self.n_averaged: torch.Tensor | None = None

    @property
    def swa_start(self) -> int:
        """The first SWA epoch, 0-based."""
        assert isinstance(self._swa_epoch_start, int), "resolved at the start of fit"
        return max(self._swa_epoch_start - 1, 0)

    @property
    def swa_end(self) -> float:
        """The last SWA epoch, 0-based (``inf`` with ``max_epochs=-1``)."""
        return float("inf") if self._max_epochs == -1 else self._max_epochs - 1

    @property
    def average_model(self) -> torch.nn.Module | None:
        """The averaged copy of the model (from the start of ``fit`` on)."""
        return self._average_model

    @staticmethod
    def avg_fn(averaged: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
        """The equally weighted running mean: the new average after ``num_averaged`` earlier ones."""
        return averaged + (current - averaged) / (num_averaged + 1)

    # -- the run --------------------------------------------------------------------------------

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Check the setup, resolve ``swa_epoch_start`` and make the averaged copy."""
        if len(trainer.optimizers) != 1:
            raise MisconfigurationError(
                f"StochasticWeightAveraging works with one optimizer; configure_optimizers() returned "
                f"{len(trainer.optimizers)}."
            )
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfigurationError(
                f"StochasticWeightAveraging replaces one scheduler; configure_optimizers() returned "
                f"{len(trainer.lr_scheduler_configs)}."
            )
        refuse_sharded(module, "StochasticWeightAveraging")
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None else -1
        if isinstance(self._swa_epoch_start, float):
            if max_epochs == -1:
                raise MisconfigurationError(
                    f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) is a fraction of max_epochs, "
                    "but max_epochs=-1. Hint: give the epoch as an int."
                )
            self._swa_epoch_start = int(max_epochs * self._swa_epoch_start)
        self._max_epochs = max_epochs
        if self.swa_start > self.swa_end:
            rank_zero_warn(
                f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) starts in epoch "
                f"{self.swa_start} (counting from 0), after the last epoch of max_epochs={max_epochs}: no weights "
                "will be averaged in this fit. Hint: give an earlier epoch, or a fraction of max_epochs such as 0.8."
            )
        self._contains_batch_norm = any(isinstance(m, _BatchNorm) for m in module.modules())
        self._average_model = copy_module(module, trainer)
        if self._device is not None:
            self._average_model.to(self._device)

    @override
    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """A fit resumed in the middle of an SWA epoch: bring back the SWA schedule at once."""
        if trainer.fit_loop.progress.batches_done and self._scheduler_state is not None:
            self._initialize(trainer, module)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Start SWA in its first epoch; average the weights at the start of every SWA epoch."""
        epoch = trainer.current_epoch
        if self.swa_start <= epoch <= self.swa_end:
            self._initialize(trainer, module)
            if epoch > self._latest_update_epoch:
                assert self.n_averaged is not None and self._average_model is not None
                self.update_parameters(self._average_model, module, self.n_averaged, self._avg_fn)
                self._latest_update_epoch = epoch

    def _initialize(self, trainer: Trainer, module: Module) -> None:
        if self._initialized:
            return
        self._initialized = True
        optimizer = trainer.optimizers[0]
        if not isinstance(self._swa_lrs, list):
            self._swa_lrs = [float(self._swa_lrs)] * len(optimizer.param_groups)
        if len(self._swa_lrs) != len(optimizer.param_groups):
            raise MisconfigurationError(
                f"StochasticWeightAveraging(swa_lrs={self._swa_lrs}) gives {len(self._swa_lrs)} learning rates, but "
                f"the optimizer has {len(optimizer.param_groups)} parameter groups."
            )
        for lr, group in zip(self._swa_lrs, optimizer.param_groups):
            group["initial_lr"] = lr
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=cast(Any, self._swa_lrs),  # SWALR takes one rate per group too (its stubs say one float)
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=cast(Literal["cos", "linear"], self._annealing_strategy),  # checked in __init__
            last_epoch=self._max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif trainer.current_epoch != self.swa_start:
            rank_zero_warn("StochasticWeightAveraging starts after swa_start without a checkpoint to continue from.")
        config = LRSchedulerConfig(self._swa_scheduler)  # every epoch, as SWALR expects
        if trainer.lr_scheduler_configs:
            replaced = trainer.lr_scheduler_configs[0]
            if replaced.interval != "epoch" or replaced.frequency != 1:
                rank_zero_warn(f"StochasticWeightAveraging steps its schedule every epoch; it replaces {replaced}.")
            rank_zero_info(f"StochasticWeightAveraging: {type(replaced.scheduler).__name__} is replaced by SWALR.")
            trainer.lr_scheduler_configs[0] = config
        else:
            trainer.lr_scheduler_configs.append(config)
        if self.n_averaged is None:
            self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long, device=module.device)

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """After the last SWA epoch, give the model the averaged weights (and recompute batch-norm statistics)."""
        if self._average_model is None or not self._initialized:
            return
        if self._max_epochs != -1 and trainer.current_epoch - 1 != self.swa_end:
            # stopped before the end of SWA (early stopping, max_steps...): the model keeps its own weights
            rank_zero_warn(
                f"StochasticWeightAveraging: training stopped after epoch {trainer.current_epoch - 1}, before the last "
                f"SWA epoch {int(self.swa_end)} (max_epochs={self._max_epochs}), so the model keeps its own weights; "
                f"the average of {int(self.n_averaged or 0)} epoch(s) is in average_model. Hint: "
                "StochasticWeightAveraging.transfer_weights(callback.average_model, model) gives them to the model."
            )
            return
        self.transfer_weights(self._average_model, module)
        if self._contains_batch_norm:
            self._update_batch_norm(trainer, module)

    @staticmethod
    def transfer_weights(source: torch.nn.Module, target: torch.nn.Module) -> None:
        """Copy ``source``'s parameters into ``target``'s."""
        for src, dst in zip(source.parameters(), target.parameters()):
            dst.detach().copy_(src.to(dst.device))

    @staticmethod
    def update_parameters(
        average: torch.nn.Module, module: torch.nn.Module, n_averaged: torch.Tensor, avg_fn: AverageFunction
    ) -> None:
        """Fold ``module``'s parameters into ``average`` and count one more average."""
        for p_average, p_model in zip(average.parameters(), module.parameters()):
            device = p_average.device
            current = p_model.detach().to(device)
            new = current if n_averaged == 0 else avg_fn(p_average.detach(), current, n_averaged.to(device))
            p_average.detach().copy_(new)
        n_averaged += 1

    def _update_batch_norm(self, trainer: Trainer, module: Module) -> None:
        """One pass of ``training_step`` over the training data, no gradients, batch norm averaging every batch."""
        layers = [m for m in module.modules() if isinstance(m, _BatchNorm)]
        momenta = {}
        for layer in layers:
            if layer.running_mean is not None and layer.running_var is not None:
                layer.running_mean.zero_()
                layer.running_var.fill_(1)
            if layer.num_batches_tracked is not None:
                layer.num_batches_tracked.zero_()
            momenta[layer] = layer.momentum
            layer.momentum = None  # a cumulative average over the pass
        transfer = batch_transfer(trainer.strategy, trainer.module, trainer.datamodule, 0)
        user_step: Callable[..., Any] = module.training_step
        step = user_step if accepts_batch_idx(user_step) else (lambda batch, batch_idx: user_step(batch))
        limit = trainer.num_training_batches
        training = module.training
        module.train()
        try:
            with torch.no_grad():
                for batch_idx, batch in enumerate(trainer.train_dataloader):
                    if batch_idx >= limit:
                        break
                    step(transfer(batch), batch_idx)
        finally:
            module.train(training)
            for layer, momentum in momenta.items():
                layer.momentum = momentum
        if trainer.world_size > 1:  # each process saw its shard: agree on the mean of their statistics
            for layer in layers:
                for buffer in (layer.running_mean, layer.running_var):
                    if buffer is not None:
                        buffer.copy_(trainer.strategy.reduce(buffer.clone(), reduce_op="mean"))

    # -- checkpoints ----------------------------------------------------------------------------

    @override
    def state_dict(self) -> dict[str, Any]:
        """The number of averages, the last averaged epoch, the SWA schedule and the averaged weights."""
        return {
            "n_averaged": 0 if self.n_averaged is None else int(self.n_averaged.item()),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    @override
    def on_load_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """A checkpoint written during SWA: drop the model's scheduler, whose place SWALR had taken."""
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is not None and state.get("scheduler_state") is not None:
            trainer.lr_scheduler_configs.clear()  # SWALR comes back with its saved state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the average and the schedule of the checkpoint's run."""
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        self._initialized = False
        self.n_averaged = None
        average = state_dict.get("average_model_state")
        if average is not None and self._average_model is not None:
            self._average_model.load_state_dict(average)

    def __repr__(self) -> str:
        return f"StochasticWeightAveraging(swa_lrs={self._swa_lrs}, swa_epoch_start={self._swa_epoch_start})"
