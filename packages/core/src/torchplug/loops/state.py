"""What the loops read: the run's configuration (the checked loop arguments) and its mutable state.

:class:`LoopConfig` holds the Trainer's loop arguments once checked; it is frozen, and the one
way to change a value afterwards (``trainer.max_steps = ...``, ``trainer.fit_loop.max_epochs =
...``, the tuner's trial limits) is :meth:`RunState.configure`, which checks it as the Trainer's
argument is checked and replaces the configuration. :class:`RunState` is what a
``fit``/``validate``/``test``/``predict`` call changes: the module, its optimizers, the stage,
the stop request. The Trainer owns one of each and hands them to the loops, which never see the
Trainer itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchplug.trainer import arguments as check
from torchplug.trainer.states import TrainerState

if TYPE_CHECKING:
    import torch

    from torchplug.core.datamodule import DataModule
    from torchplug.core.module import Module
    from torchplug.trainer.optimizers import LRSchedulerConfig

__all__ = ["SETTABLE", "LoopConfig", "RunState"]


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """The Trainer's loop arguments, checked (see :class:`torchplug.Trainer` for each one's meaning).

    Frozen: change a value through :meth:`RunState.configure` (or the Trainer's property of the same
    name), which checks it first.
    """

    max_epochs: int | None = 1000
    max_steps: int = -1
    min_epochs: int | None = None
    min_steps: int | None = None
    limit_train_batches: int | float | None = None
    limit_val_batches: int | float | None = None
    limit_test_batches: int | float | None = None
    limit_predict_batches: int | float | None = None
    val_check_interval: int | float | timedelta = 1.0
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: int = 2
    log_every_n_steps: int = 50
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    nonfinite_loss: str = "raise"
    reload_dataloaders_every_n_epochs: int = 0
    detect_anomaly: bool = False
    sync_batchnorm: bool = False
    enable_autolog_hparams: bool = True
    barebones: bool = False
    fast_dev_run: int | bool = False
    overfit_batches: int | float = 0.0
    default_root_dir: str = "."


def _int(minimum: int, allow: tuple[Any, ...]) -> Callable[[str, Any, LoopConfig], Any]:
    return lambda label, value, _config: check.check_int(label, value, minimum, allow)


def _limit(label: str, value: Any, _config: LoopConfig) -> Any:
    return check.check_limit(label, value)


#: The values that may change after the Trainer is made, each with the check its argument gets.
SETTABLE: dict[str, Callable[[str, Any, LoopConfig], Any]] = {
    "max_epochs": _int(0, (None, -1)),
    "max_steps": _int(1, (-1,)),
    "min_epochs": _int(0, (None,)),
    "min_steps": _int(0, (None,)),
    "limit_train_batches": _limit,
    "limit_val_batches": _limit,
    "limit_test_batches": _limit,
    "limit_predict_batches": _limit,
    "val_check_interval": lambda label, value, _c: check.check_val_check_interval(value),
    "check_val_every_n_epoch": _int(1, (None,)),
    "num_sanity_val_steps": _int(0, (-1,)),
    "log_every_n_steps": _int(1, ()),
    "accumulate_grad_batches": _int(1, ()),
    "gradient_clip_val": lambda label, value, _c: check.check_clip_val(value),
    "gradient_clip_algorithm": lambda label, value, c: check.check_clip_algorithm(value, c.gradient_clip_val),
}


@dataclass(slots=True, eq=False)
class RunState:
    """The mutable state of the Trainer's runs, handed to the loops in place of the Trainer.

    Attributes:
        config: The checked loop arguments (replaced, never mutated: see :meth:`configure`).
        status: The call, stage and status in progress (``trainer.state``).
        module: The Module of the current (or last) call; None before the first.
        datamodule: Its DataModule, if any.
        optimizers: The optimizers ``configure_optimizers`` returned.
        lr_scheduler_configs: Their schedulers, with when each steps.
        should_stop: A request (EarlyStopping, the Timer, a signal) to end training at the next boundary.
    """

    config: LoopConfig = field(default_factory=LoopConfig)
    status: TrainerState = field(default_factory=TrainerState)
    module: Module | None = None
    datamodule: DataModule | None = None
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    lr_scheduler_configs: list[LRSchedulerConfig] = field(default_factory=list)
    should_stop: bool = False

    def configure(self, name: str, value: Any, label: str | None = None) -> None:
        """Change one loop argument after the Trainer was made, checked as the argument is.

        Args:
            name: The argument (``"max_steps"``...).
            value: Its new value.
            label: How the error names it (default ``trainer.<name>``).

        Raises:
            MisconfigurationError: The value is not valid for ``name``.
            AttributeError: ``name`` cannot change once the Trainer is made.
        """
        checker = SETTABLE.get(name)
        if checker is None:
            raise AttributeError(
                f"trainer.{name} cannot be changed once the Trainer is made. Hint: pass {name}= to Trainer(...)."
            )
        checked = checker(label or f"trainer.{name}", value, self.config)
        self.config = dataclasses.replace(self.config, **{name: checked})
