"""Reading ``configure_optimizers`` and stepping learning-rate schedulers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import torch
from torch.optim import Optimizer

from torchplug._errors import MisconfigurationError

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["LRSchedulerConfig", "configure_optimizers", "parse_optimizers"]

_SCHEDULER_KEYS: Final = {"scheduler", "name", "interval", "frequency", "monitor", "strict"}


@dataclass
class LRSchedulerConfig:
    """A scheduler and when to step it.

    Attributes:
        scheduler: The ``torch.optim.lr_scheduler`` object.
        name: Shown by LearningRateMonitor (default: ``lr-<Optimizer class>``).
        interval: ``"epoch"`` (after each epoch's validation) or ``"step"`` (after each optimizer step).
        frequency: Step it every this many intervals.
        monitor: Metric passed to ``ReduceLROnPlateau.step``.
        strict: Raise when ``monitor`` was not logged (otherwise skip the step with a warning).
    """

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True

    @property
    def reduce_on_plateau(self) -> bool:
        """Whether the scheduler needs a metric value to step."""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def parse_optimizers(output: Any) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """Turn what ``configure_optimizers`` returned into optimizers and scheduler configs.

    Raises:
        MisconfigurationError: The value has none of the accepted forms (listed in the message).
    """
    if isinstance(output, Optimizer):
        return [output], []
    if isinstance(output, Mapping):
        return _from_dicts([output])
    if isinstance(output, (list, tuple)):
        if len(output) == 2 and isinstance(output[0], (list, tuple)) and isinstance(output[1], (list, tuple)):
            optimizers = list(output[0])
            _check_optimizers(optimizers)
            return optimizers, [_scheduler_config(s) for s in output[1]]
        if output and all(isinstance(o, Mapping) for o in output):
            return _from_dicts(list(output))
        optimizers = list(output)
        _check_optimizers(optimizers)
        return optimizers, []
    raise MisconfigurationError(
        f"configure_optimizers() returned {type(output).__name__}; return an optimizer, a list of optimizers, "
        "([optimizers], [schedulers]), a dict {'optimizer': ..., 'lr_scheduler': ...}, or a list of such dicts."
    )


def _check_optimizers(optimizers: Sequence[Any]) -> None:
    bad = [o for o in optimizers if not isinstance(o, Optimizer)]
    if bad or not optimizers:
        raise MisconfigurationError(
            f"configure_optimizers() must return torch.optim.Optimizer objects; got {[type(o).__name__ for o in bad]}."
        )


def _from_dicts(items: list[Mapping[str, Any]]) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    optimizers, configs = [], []
    for item in items:
        unknown = set(item) - {"optimizer", "lr_scheduler", "monitor"}
        if "optimizer" not in item or unknown:
            raise MisconfigurationError(
                f"configure_optimizers() dict has keys {sorted(item)}; expected 'optimizer' and optionally "
                "'lr_scheduler' and 'monitor'."
            )
        optimizers.append(item["optimizer"])
        if item.get("lr_scheduler") is not None:
            config = _scheduler_config(item["lr_scheduler"])
            config.monitor = config.monitor or item.get("monitor")
            configs.append(config)
    _check_optimizers(optimizers)
    return optimizers, configs


def _scheduler_config(value: Any) -> LRSchedulerConfig:
    if isinstance(value, Mapping):
        unknown = set(value) - _SCHEDULER_KEYS
        if "scheduler" not in value or unknown:
            raise MisconfigurationError(
                f"lr_scheduler dict has keys {sorted(value)}; expected 'scheduler' and optionally "
                f"{', '.join(sorted(_SCHEDULER_KEYS - {'scheduler'}))}."
            )
        config = LRSchedulerConfig(**value)
    else:
        config = LRSchedulerConfig(value)
    if config.interval not in ("epoch", "step"):
        raise MisconfigurationError(f"lr_scheduler interval={config.interval!r}: choose 'epoch' or 'step'.")
    if not isinstance(config.frequency, int) or config.frequency < 1:
        raise MisconfigurationError(f"lr_scheduler frequency={config.frequency!r}: give a positive int.")
    if config.reduce_on_plateau and config.monitor is None:
        raise MisconfigurationError(
            "ReduceLROnPlateau needs a metric: return {'optimizer': opt, 'lr_scheduler': "
            "{'scheduler': sched, 'monitor': 'val_loss'}}."
        )
    return config


def configure_optimizers(trainer: Trainer) -> list[Optimizer]:
    """Call the module's ``configure_optimizers`` and keep the result on the Trainer (``trainer.optimizers``...).

    The strategy calls this once the parameters are in their final form (moved, sharded).

    Raises:
        MisconfigurationError: The return value has none of the accepted forms, or automatic
            optimization got several optimizers.
    """
    module = trainer.module
    trainer.optimizers, trainer.lr_scheduler_configs = parse_optimizers(module.configure_optimizers())
    if module.automatic_optimization and len(trainer.optimizers) > 1:
        raise MisconfigurationError(
            f"configure_optimizers() returned {len(trainer.optimizers)} optimizers; automatic optimization steps "
            "one. Hint: set self.automatic_optimization = False and step them in training_step."
        )
    return trainer.optimizers
