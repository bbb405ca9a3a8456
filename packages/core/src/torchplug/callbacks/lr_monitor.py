"""``LearningRateMonitor``: send each optimizer's learning rate (and momentum, weight decay) to the loggers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    import torch

    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["LearningRateMonitor"]

_INTERVALS: Final = (None, "step", "epoch")


@dataclass(frozen=True)
class _Tracked:
    """One optimizer to log: its metric names (one per parameter group) and its scheduler's interval."""

    optimizer: torch.optim.Optimizer
    names: tuple[str, ...]
    interval: str | None  # "step" or "epoch" for a scheduled optimizer, None without a scheduler


class LearningRateMonitor(Callback):
    """Log the learning rate of every optimizer as training goes, as ``lr-<OptimizerClass>``.

    Names: ``lr-SGD``; a second optimizer of the same class ``lr-SGD-1``; with several parameter
    groups ``lr-SGD/pg1``, ``lr-SGD/pg2`` (or ``lr-SGD/<name>`` when the group has a ``"name"``);
    a scheduler configured with ``"name": "my_lr"`` logs as ``my_lr``. Momentum and weight decay,
    when asked for, follow as ``<name>-momentum`` and ``<name>-weight_decay``.

    Step values are logged every ``Trainer(log_every_n_steps=...)`` optimizer steps, before the
    step; epoch values at the start of each training epoch.

    Example:
        >>> Trainer(logger=CSVLogger("logs"), callbacks=[LearningRateMonitor(logging_interval="step")])

    Args:
        logging_interval: ``"step"``: log every ``log_every_n_steps`` steps; ``"epoch"``: log at the
            start of each epoch; None: each scheduler at its own interval (``"interval"`` in
            ``configure_optimizers``), optimizers without a scheduler at both.
        log_momentum: Also log the momentum (``betas[0]`` for Adam-like optimizers).
        log_weight_decay: Also log the weight decay.

    Raises:
        MisconfigurationError: At the start of ``fit`` when the Trainer has no logger.
    """

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in _INTERVALS:
            raise MisconfigurationError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}): choose "
                "'step', 'epoch' or None (each scheduler's own interval)."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self._tracked: list[_Tracked] = []
        self._last_step_logged = -1
        #: The values logged last, by name (what the loggers received).
        self.last_values: dict[str, float] = {}
        #: Every learning rate logged in this fit, by name (``lrs["lr-SGD"]``), in the order logged.
        self.lrs: dict[str, list[float]] = {}

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Check for a logger and name every optimizer (they exist by now)."""
        if not trainer.loggers and not trainer.fast_dev_run:
            raise MisconfigurationError(
                "LearningRateMonitor needs a logger: Trainer(logger=...). Hint: "
                "Trainer(logger=CSVLogger('logs')), or remove the LearningRateMonitor."
            )
        self._tracked = _track(trainer)
        self._last_step_logged = -1
        self.lrs = {name: [] for tracked in self._tracked for name in tracked.names}
        if self.log_momentum and any(not _has_momentum(t.optimizer) for t in self._tracked):
            rank_zero_warn(
                "LearningRateMonitor(log_momentum=True): some optimizers have no momentum; 0 is logged for them."
            )

    def on_train_batch_start(self, trainer: Trainer, module: Module, batch: Any, batch_idx: int) -> None:
        """Log the step values every ``log_every_n_steps`` optimizer steps (once per step)."""
        if self.logging_interval == "epoch":
            return
        step = trainer.fit_loop.progress.stepped_batches  # the loggers' step, as for the step metrics
        if ((step + 1) % trainer.log_every_n_steps and not trainer.should_stop) or step == self._last_step_logged:
            return
        self._last_step_logged = step
        self._log(trainer, "step")

    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Log the epoch values."""
        if self.logging_interval != "step":
            self._log(trainer, "epoch")

    def _log(self, trainer: Trainer, moment: str) -> None:
        every = self.logging_interval is not None
        stats: dict[str, float] = {}
        for tracked in self._tracked:
            if every or tracked.interval in (None, moment):
                stats.update(self._stats(tracked))
        if stats:
            self.last_values.update(stats)
            for name, value in stats.items():
                if name in self.lrs:
                    self.lrs[name].append(value)
            if trainer.is_global_zero:
                step = trainer.fit_loop.progress.stepped_batches
                for logger in trainer.loggers:
                    logger.log_metrics(stats, step)

    def _stats(self, tracked: _Tracked) -> dict[str, float]:
        stats: dict[str, float] = {}
        for name, group in zip(tracked.names, tracked.optimizer.param_groups):
            stats[name] = float(group["lr"])
            if self.log_momentum:
                betas = group.get("betas")
                stats[f"{name}-momentum"] = float(betas[0] if betas is not None else group.get("momentum", 0.0))
            if self.log_weight_decay:
                stats[f"{name}-weight_decay"] = float(group.get("weight_decay", 0.0))
        return stats


def _track(trainer: Trainer) -> list[_Tracked]:
    """Name every optimizer: the scheduled ones (in scheduler order) first, then the others."""
    seen: dict[str, int] = {}
    tracked: list[_Tracked] = []
    scheduled: set[int] = set()

    def names_for(optimizer: torch.optim.Optimizer, base: str | None) -> tuple[str, ...]:
        name = base or f"lr-{type(optimizer).__name__}"
        count = seen.get(name, 0)
        seen[name] = count + 1
        if count:
            name = f"{name}-{count}"
        groups = optimizer.param_groups
        if len(groups) == 1:
            return (name,)
        return tuple(f"{name}/{g['name']}" if "name" in g else f"{name}/pg{i + 1}" for i, g in enumerate(groups))

    for config in trainer.lr_scheduler_configs:
        optimizer = config.scheduler.optimizer
        scheduled.add(id(optimizer))
        tracked.append(_Tracked(optimizer, names_for(optimizer, config.name), config.interval))
    for optimizer in trainer.optimizers:
        if id(optimizer) not in scheduled:
            tracked.append(_Tracked(optimizer, names_for(optimizer, None), None))
    return tracked


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    return all("momentum" in g or "betas" in g for g in optimizer.param_groups)
