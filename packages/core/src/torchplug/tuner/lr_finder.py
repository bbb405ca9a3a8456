"""The learning-rate range test: train a few steps with a growing learning rate, record the loss, suggest a rate.

:func:`lr_find` runs inside a fit (from a callback's hook, once the optimizers exist): it saves a
checkpoint, trains ``num_training`` steps with only its own callback, the learning rate rising
from ``min_lr`` to ``max_lr``, then restores everything from the checkpoint (weights, optimizer,
schedulers, loop, callbacks, random state) and removes it. Only what the test found remains.
The steps go on over as many epochs as they need: the fit's ``max_epochs`` does not bound them.
"""

from __future__ import annotations

import importlib
import os
import uuid
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.trainer.optimizers import LRSchedulerConfig
from torchplug.tuner._attributes import has_attr, set_attr
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torchplug.utilities.seed import capture_rng_states, restore_rng_states

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["LRFinder", "lr_find"]

MODES = ("linear", "exponential")


def _import_matplotlib(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"{what} draws with matplotlib, which is not installed. Hint: pip install 'core[matplotlib]' "
            "(or pip install matplotlib)."
        ) from exc


class LRFinder:
    """The result of a learning-rate range test: the rates tried, the smoothed losses, and a suggestion.

    Attributes:
        mode: ``"exponential"`` or ``"linear"``: how the rate grew from step to step.
        lr_min: The first rate.
        lr_max: The rate the last step would reach.
        num_training: The steps asked for (fewer when the loss diverged).
        results: ``{"lr": [...], "loss": [...]}``, one entry per step.
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        if mode not in MODES:
            raise MisconfigurationError(f"lr_find(mode={mode!r}): choose 'exponential' or 'linear'.")
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None
        self._warned = False

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the loss falls fastest (the steepest negative slope of loss over rate).

        Args:
            skip_begin: Steps left out at the start (their loss is still noisy).
            skip_end: Steps left out at the end (where the loss may explode).

        Returns:
            The suggested rate, or None when fewer than two finite losses remain (a warning says
            how to get more).
        """
        lrs_all, losses_all = self.results["lr"], self.results["loss"]
        end = len(losses_all) - skip_end
        indices = [i for i in range(skip_begin, end) if torch.isfinite(torch.tensor(losses_all[i]))]
        if len(indices) < 2:
            if self._warned:
                self._optimal_idx = None
                return None
            self._warned = True
            rank_zero_warn(
                f"The learning rate finder has {len(indices)} usable loss values after leaving out {skip_begin} at the "
                f"start and {skip_end} at the end: too few for a suggestion. Hint: raise num_training, give more "
                "training batches, or lower skip_begin."
            )
            self._optimal_idx = None
            return None
        losses = torch.tensor([losses_all[i] for i in indices], dtype=torch.float64)
        lrs = torch.tensor([lrs_all[i] for i in indices], dtype=torch.float64)
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        self._optimal_idx = indices[int(torch.argmin(gradients).item())]
        return lrs_all[self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """Plot loss over learning rate (log scale for the exponential mode) with matplotlib.

        Args:
            suggest: Mark the suggested rate with a red dot.
            show: Call ``plt.show()``.
            ax: Draw into these axes (default: a new figure).

        Returns:
            The matplotlib figure.

        Raises:
            ModuleNotFoundError: matplotlib is not installed (``pip install 'core[matplotlib]'``).
        """
        if ax is None:
            figure, ax = _import_matplotlib("matplotlib.pyplot", "LRFinder.plot()").subplots()
        else:
            figure = ax.figure
        lrs, losses = self.results["lr"], self.results["loss"]
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None and self._optimal_idx is not None:
            ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            _import_matplotlib("matplotlib.pyplot", "LRFinder.plot()").show()
        return figure

    def save_plot(self, path: str | os.PathLike[str], suggest: bool = True) -> str:
        """Write :meth:`plot` to ``path`` as a PNG and return the path.

        Raises:
            ModuleNotFoundError: matplotlib is not installed (``pip install 'core[matplotlib]'``).
        """
        figure = _import_matplotlib("matplotlib.figure", "LRFinder.save_plot()").Figure()  # no pyplot, no display
        self.plot(suggest=suggest, ax=figure.subplots())
        path = os.fspath(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        figure.savefig(path, format="png")
        return path

    def __repr__(self) -> str:
        return f"LRFinder(mode={self.mode!r}, steps={len(self.results['loss'])}, suggestion={self.suggestion()})"


class _IncreasingLR(LRScheduler):
    """The learning rate of step ``i``: from the base rate to ``end_lr`` over ``num_iter`` steps."""

    def __init__(self, optimizer: torch.optim.Optimizer, end_lr: float, num_iter: int, exponential: bool) -> None:
        self.end_lr = end_lr
        self.num_iter = num_iter
        self.exponential = exponential
        self._lr: list[Any] = []
        super().__init__(optimizer)

    @override
    def get_lr(self) -> list[float | torch.Tensor]:
        step = self.last_epoch + 1
        fraction = step / self.num_iter
        if self.last_epoch <= 0:
            lrs = list(self.base_lrs)
        elif self.exponential:
            lrs = [base * (self.end_lr / base) ** fraction for base in self.base_lrs]
        else:
            lrs = [base + fraction * (self.end_lr - base) for base in self.base_lrs]
        self._lr = lrs
        return lrs

    @property
    def lr(self) -> list[Any]:
        """The rates of the step about to run."""
        return self._lr


class _LRCallback(Callback):
    """Records the rate before each optimizer step and the smoothed loss after it; stops when the loss diverges."""

    def __init__(
        self, num_training: int, early_stop_threshold: float | None, show_bar: bool, beta: float = 0.98
    ) -> None:
        self.num_training = num_training
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self.avg_loss = 0.0
        self.best_loss = 0.0
        self.diverged = False
        self._show_bar = show_bar
        self._bar: Any = None

    def _stepping(self, trainer: Trainer, batch_idx: int) -> bool:
        return (batch_idx + 1) % trainer.batches_per_optimizer_step == 0

    @override
    def on_train_batch_start(self, trainer: Trainer, module: Module, batch: Any, batch_idx: int) -> None:
        if not self._stepping(trainer, batch_idx):
            return
        if self._show_bar and self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(desc="Finding best initial lr", total=self.num_training)
        self.lrs.append(trainer.lr_scheduler_configs[0].scheduler.lr[0])

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._stepping(trainer, batch_idx):
            return
        if self._bar is not None:
            self._bar.update()
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):  # training_step returned None: no loss for this rate
            self.losses.append(float("nan"))
            return
        step = trainer.global_step
        self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * float(loss)
        smoothed = self.avg_loss / (1 - self.beta ** (step + 1))  # bias-corrected, as Lightning's finder
        diverged = (
            self.early_stop_threshold is not None and step > 1 and smoothed > self.early_stop_threshold * self.best_loss
        )
        if trainer.world_size > 1:  # rank 0 decides, so that every process stops at the same step
            diverged = trainer.strategy.broadcast(diverged)
        if diverged:
            self.diverged = True
            trainer.should_stop = True
        if smoothed < self.best_loss or step == 1:
            self.best_loss = smoothed
        self.losses.append(smoothed)

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _say_why_it_stopped(recorder: _LRCallback, steps: int, num_training: int, stop_requested: bool) -> None:
    """Tell why the test ran fewer than ``num_training`` steps: the loss diverged, a stop request, or no more data."""
    if steps >= num_training:
        return
    if recorder.diverged:
        rank_zero_info(
            f"The learning rate finder stopped after {steps} steps: the loss diverged (its smoothed value rose "
            f"above early_stop_threshold={recorder.early_stop_threshold} times the lowest)."
        )
    elif stop_requested:
        rank_zero_info(
            f"The learning rate finder stopped after {steps} of num_training={num_training} steps: the model asked "
            "the fit to stop (trainer.should_stop)."
        )
    else:
        rank_zero_warn(
            f"The learning rate finder ran {steps} of num_training={num_training} steps: the training data ran out "
            "(an epoch brought no batch to step on). Hint: give more training data or a smaller batch size, or ask "
            f"for as many steps as the data gives (num_training={steps})."
        )


def find_lr_attr(module: Module, trainer: Trainer, attr_name: str = "") -> str:
    """The attribute that holds the learning rate: ``attr_name``, else ``lr``, else ``learning_rate``.

    Raises:
        AttributeError: None of them is on the module (or its hparams, or the DataModule).
    """
    if attr_name:
        if not has_attr(module, attr_name, trainer):
            raise AttributeError(
                f"lr_find(attr_name={attr_name!r}): {type(module).__name__} has no such attribute or hyperparameter."
            )
        return attr_name
    for name in ("lr", "learning_rate"):
        if has_attr(module, name, trainer):
            return name
    raise AttributeError(
        f"lr_find(update_attr=True) writes the suggestion to the module's 'lr' or 'learning_rate' (or hparams), but "
        f"{type(module).__name__} has neither. Hint: name yours with attr_name=..., or pass update_attr=False."
    )


def lr_find(
    trainer: Trainer,
    module: Module,
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    update_attr: bool = False,
    attr_name: str = "",
) -> LRFinder | None:
    """Run the range test inside the current fit and put the fit back as it was (see the module docstring).

    Args:
        trainer: The Trainer, inside ``fit`` with its optimizers set up.
        module: The module being fit.
        min_lr: The first learning rate.
        max_lr: The last one.
        num_training: How many optimizer steps (one rate each), over as many epochs as they take
            (the fit's ``max_epochs`` does not cut them short).
        mode: ``"exponential"`` or ``"linear"`` growth.
        early_stop_threshold: Stop when the smoothed loss exceeds this times the best one (None: never).
        update_attr: Write the suggestion to the module's learning-rate attribute and to the
            optimizer's parameter groups.
        attr_name: That attribute's name (default: ``lr`` or ``learning_rate``).

    Returns:
        The :class:`LRFinder`, or None under ``fast_dev_run``.

    Raises:
        MisconfigurationError: More than one optimizer, or arguments out of range.
    """
    if trainer.fast_dev_run:
        rank_zero_warn("The learning rate finder is skipped under fast_dev_run.")
        return None
    if not 0 < min_lr < max_lr:
        raise MisconfigurationError(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): give 0 < min_lr < max_lr.")
    if isinstance(num_training, bool) or not isinstance(num_training, int) or num_training < 1:
        raise MisconfigurationError(f"lr_find(num_training={num_training!r}): give an int >= 1.")
    if len(trainer.optimizers) != 1:
        raise MisconfigurationError(
            "The learning rate finder works with one optimizer; configure_optimizers() returned "
            f"{len(trainer.optimizers)}."
        )
    if update_attr:
        attr_name = find_lr_attr(module, trainer, attr_name)
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    path = trainer.strategy.broadcast(os.path.join(trainer.default_root_dir, f".lr_find_{uuid.uuid4()}.ckpt"))
    rng = (capture_rng_states(), trainer.accelerator.get_rng_state())  # the test consumes no randomness of the fit
    trainer.save_checkpoint(path)
    saved = (trainer.callbacks, trainer.loggers, trainer.lr_scheduler_configs, trainer.max_steps, trainer.max_epochs)
    bar = trainer.progress_bar_callback
    recorder = _LRCallback(num_training, early_stop_threshold, show_bar=bar is not None and bar.is_enabled)
    finished = False
    try:
        optimizer = trainer.optimizers[0]
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = min_lr
        scheduler = _IncreasingLR(optimizer, max_lr, num_training, exponential=mode == "exponential")
        trainer.lr_scheduler_configs = [LRSchedulerConfig(scheduler, interval="step")]
        trainer.callbacks = [recorder]
        trainer.loggers = []
        trainer.max_steps = trainer.global_step + num_training
        # The range test needs its steps, not the fit's epochs: the data cycles until they are done (an
        # epoch with no optimizer step still ends the loop, so a stream that runs dry cannot spin).
        trainer.max_epochs = -1
        trainer.should_stop = False
        with warnings.catch_warnings():
            # The loop's advice on a dry epoch names max_epochs=-1, which is the finder's, not the user's:
            # _say_why_it_stopped tells it in the finder's terms.
            warnings.filterwarnings("ignore", message=r"fit\(\) stopped after epoch \d+: the epoch took no optimizer")
            trainer.fit_loop.run()
        _say_why_it_stopped(recorder, len(recorder.losses), num_training, trainer.should_stop)
        finder.results = trainer.strategy.broadcast({"lr": recorder.lrs, "loss": recorder.losses})
        finished = True
    finally:
        trainer.callbacks, trainer.loggers, trainer.lr_scheduler_configs, trainer.max_steps = saved[:4]
        trainer.max_epochs = saved[4]
        trainer.restore_checkpoint(path)
        trainer.strategy.remove_checkpoint(path)
        trainer.fit_loop.restore(trainer.fit_loop.state_dict(), None, None)  # keep the random state restored below
        restore_rng_states(rng[0])
        trainer.accelerator.set_rng_state(rng[1])
    if update_attr and finished:
        lr = finder.suggestion()
        if lr is not None:
            set_attr(module, attr_name, lr, trainer)
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = lr
            rank_zero_info(f"Learning rate set to {lr}")
    return finder
