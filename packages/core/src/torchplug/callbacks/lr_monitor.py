"""``LearningRateMonitor``: send each optimizer's learning rate (and momentum, weight decay) to the loggers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import torch

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
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

    Names, as Lightning gives them: ``lr-SGD``; a second optimizer of the same class ``lr-SGD-1``;
    with several parameter groups ``lr-SGD/pg1``, ``lr-SGD/pg2``, and ``lr-SGD/<name>`` for a group
    with a ``"name"`` (also when it is the only group); a scheduler configured with
    ``"name": "my_lr"`` logs as ``my_lr``. Momentum (``betas[0]`` for Adam-like optimizers) and
    weight decay, when asked for, follow as ``<name>-momentum`` and ``<name>-weight_decay``. A group
    added later (a backbone unfrozen) is named from then on, the first group's name becoming
    ``<name>/pg1``.

    Step values are logged every ``Trainer(log_every_n_steps=...)`` optimizer steps, before the
    step; epoch values at the start of each training epoch. Each value logged is also put in
    ``trainer.callback_metrics`` (a tensor), so other callbacks can monitor it
    (``EarlyStopping(monitor="lr-SGD", stopping_threshold=...)``).

    Example:
        >>> Trainer(logger=CSVLogger("logs"), callbacks=[LearningRateMonitor(logging_interval="step")])

    Args:
        logging_interval: ``"step"``: log every ``log_every_n_steps`` steps; ``"epoch"``: log at the
            start of each epoch; None: each scheduler at its own interval (``"interval"`` in
            ``configure_optimizers``), optimizers without a scheduler at both.
        log_momentum: Also log the momentum (``betas[0]`` for Adam-like optimizers).
        log_weight_decay: Also log the weight decay.

    Raises:
        MisconfigurationError: At the start of ``fit`` when the Trainer has no logger, or when one
            optimizer has several parameter groups of the same ``"name"``.

    Attributes:
        lrs: Every learning rate logged in this fit, by name (``lrs["lr-SGD"]``), in the order logged.
        last_momentum_values: The momentum logged last, by name (``"lr-SGD-momentum"``; None before
            the first value, and without ``log_momentum``).
        last_weight_decay_values: The weight decay logged last, by name, likewise.
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
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Check for a logger and name every optimizer (they exist by now)."""
        if not trainer.loggers and not trainer.fast_dev_run:
            raise MisconfigurationError(
                "LearningRateMonitor needs a logger: Trainer(logger=...). Hint: "
                "Trainer(logger=CSVLogger('logs')), or remove the LearningRateMonitor."
            )
        self._tracked = _track(trainer)
        self._last_step_logged = -1
        names = [name for tracked in self._tracked for name in tracked.names]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}
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
        self._follow_new_groups(trainer)
        every = self.logging_interval is not None
        stats: dict[str, float] = {}
        for tracked in self._tracked:
            if every or tracked.interval in (None, moment):
                stats.update(self._stats(tracked))
        if stats:
            self.last_values.update(stats)
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({name: torch.tensor(value, device=device) for name, value in stats.items()})
            if trainer.is_global_zero:
                step = trainer.fit_loop.progress.stepped_batches
                for logger in trainer.loggers:
                    logger.log_metrics(stats, step)

    def _follow_new_groups(self, trainer: Trainer) -> None:
        """Name the parameter groups added since the last values (a logging step, never every step)."""
        if all(len(t.names) == len(t.optimizer.param_groups) for t in self._tracked):
            return
        self._tracked = _track(trainer)
        for tracked in self._tracked:
            for name in tracked.names:
                old = name.removesuffix("/pg1")
                if old != name and old in self.lrs and name not in self.lrs:  # the first group keeps its history
                    self.lrs[name] = self.lrs.pop(old)
                self.lrs.setdefault(name, [])

    def _stats(self, tracked: _Tracked) -> dict[str, float]:
        stats: dict[str, float] = {}
        betas = "betas" in tracked.optimizer.defaults  # Adam-like: the momentum is betas[0]
        for name, group in zip(tracked.names, tracked.optimizer.param_groups):
            lr = stats[name] = float(group["lr"])
            self.lrs.setdefault(name, []).append(lr)
            if self.log_momentum:
                key = f"{name}-momentum"
                momentum = stats[key] = float(group["betas"][0] if betas else group.get("momentum", 0.0))
                self.last_momentum_values[key] = momentum
            if self.log_weight_decay:
                key = f"{name}-weight_decay"
                decay = stats[key] = float(group.get("weight_decay", 0.0))
                self.last_weight_decay_values[key] = decay
        return stats


def _track(trainer: Trainer) -> list[_Tracked]:
    """Name every optimizer, as Lightning does: the scheduled ones (in scheduler order) first, then the others.

    An optimizer class seen a second time without a scheduler name gets ``-1`` (then ``-2``...);
    a name that would still repeat gets the next free number, so no two values share a name.

    Raises:
        MisconfigurationError: An optimizer with several parameter groups of the same ``"name"``.
    """
    classes: dict[type, int] = {}
    taken: set[str] = set()
    tracked: list[_Tracked] = []
    scheduled: set[int] = set()

    def names_for(optimizer: torch.optim.Optimizer, given: str | None) -> tuple[str, ...]:
        name = given or f"lr-{type(optimizer).__name__}"
        _refuse_duplicate_group_names(optimizer, name)
        if given is None:
            classes[type(optimizer)] = classes.get(type(optimizer), 0) + 1
        count = classes.get(type(optimizer), 0)
        unique, number = (f"{name}-{count - 1}" if count > 1 else name), max(count - 1, 0)
        while unique in taken:  # two schedulers given the same name
            number += 1
            unique = f"{name}-{number}"
        taken.add(unique)
        groups = optimizer.param_groups
        if len(groups) == 1:
            return (f"{unique}/{groups[0]['name']}" if groups[0].get("name") else unique,)
        return tuple(f"{unique}/{g.get('name') or f'pg{i}'}" for i, g in enumerate(groups, start=1))

    for config in trainer.lr_scheduler_configs:
        optimizer = config.scheduler.optimizer
        scheduled.add(id(optimizer))
        tracked.append(_Tracked(optimizer, names_for(optimizer, config.name), config.interval))
    for optimizer in trainer.optimizers:
        if id(optimizer) not in scheduled:
            tracked.append(_Tracked(optimizer, names_for(optimizer, None), None))
    return tracked


def _refuse_duplicate_group_names(optimizer: torch.optim.Optimizer, name: str) -> None:
    names = [group.get("name") or f"pg{i}" for i, group in enumerate(optimizer.param_groups, start=1)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise MisconfigurationError(
            f"LearningRateMonitor: the optimizer logged as {name!r} ({type(optimizer).__name__}) has several "
            f"parameter groups named {', '.join(map(repr, repeated))}, so their learning rates would share a name. "
            "Hint: give each group of one optimizer its own 'name'."
        )


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    return all("momentum" in g or "betas" in g for g in optimizer.param_groups)
