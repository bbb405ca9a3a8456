"""``BatchSizeFinder``: find the largest batch size that fits in memory when ``fit`` starts, and train with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.trainer.states import ExitRun

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["BatchSizeFinder"]


class BatchSizeFinder(Callback):
    """Search the batch size at the start of ``fit`` (see :func:`torchplug.tuner.batch_size_scaling.scale_batch_size`).

    The module (or its DataModule, or their hparams) holds ``batch_arg_name``, read by its
    ``train_dataloader()``/``val_dataloader()``: each trial sets it, rebuilds the loaders and
    trains ``steps_per_trial`` steps. ``"power"`` doubles the size until a step runs out of memory
    and keeps the last that fit; ``"binsearch"`` then bisects, and gives back ``margin`` of the
    result. No size exceeds the training set's length: a batch that covers it ends the search
    (and takes no margin off). Afterwards the model, optimizer, loop and random state are as
    before, and the fit proceeds with the size found. Runs in one process only (not under DDP).

    Example:
        >>> Trainer(callbacks=[BatchSizeFinder(mode="binsearch", init_val=16)])

    Args:
        mode: ``"power"`` or ``"binsearch"``.
        steps_per_trial: Optimizer steps per trial.
        init_val: The first size tried.
        max_trials: At most this many successful trials.
        batch_arg_name: The attribute or hyperparameter that holds the batch size.
        margin: ``binsearch``: the fraction given back for safety (0.05 by default).
        max_val: Never try more than this, nor more than the training set's length.

    Attributes:
        optimal_batch_size: The size found by the last search (``init_val`` before).
    """

    SUPPORTED_MODES = ("power", "binsearch")

    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise MisconfigurationError(f"BatchSizeFinder(mode={mode!r}): choose 'power' or 'binsearch'.")
        if not 0.0 <= margin < 1.0:
            raise MisconfigurationError(f"BatchSizeFinder(margin={margin!r}): give a fraction in [0, 1).")
        self.optimal_batch_size: int | None = init_val
        self._mode = mode
        self._steps_per_trial = steps_per_trial
        self._init_val = init_val
        self._max_trials = max_trials
        self._batch_arg_name = batch_arg_name
        self._margin = margin
        self._max_val = max_val
        self._early_exit = False

    def scale_batch_size(self, trainer: Trainer, module: Module) -> None:
        """Run the search now (inside ``fit``, once the optimizers exist) and keep the size found."""
        from torchplug.tuner.batch_size_scaling import scale_batch_size

        self.optimal_batch_size = scale_batch_size(
            trainer,
            module,
            mode=self._mode,
            steps_per_trial=self._steps_per_trial,
            init_val=self._init_val,
            max_trials=self._max_trials,
            batch_arg_name=self._batch_arg_name,
            margin=self._margin,
            max_val=self._max_val,
        )
        if self._early_exit:
            raise ExitRun

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Search before training starts."""
        self.scale_batch_size(trainer, module)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The size found (so that it travels with the checkpoint)."""
        return {"optimal_batch_size": self.optimal_batch_size}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Bring back the size found."""
        self.optimal_batch_size = state_dict.get("optimal_batch_size", self.optimal_batch_size)
