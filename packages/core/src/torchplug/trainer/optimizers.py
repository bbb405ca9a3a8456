"""Reading ``configure_optimizers`` and stepping learning-rate schedulers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Final

from torch.optim import Optimizer

from torchplug._errors import MisconfigurationError
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug.utilities.types import LRSchedulerConfig  # defined with the public types, read here

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["LRSchedulerConfig", "configure_optimizers", "parse_optimizers"]

_SCHEDULER_KEYS: Final = {field.name for field in fields(LRSchedulerConfig)}
#: What the Trainer reads only to step schedulers itself, which manual optimization leaves to the module.
_AUTOMATIC_ONLY_KEYS: Final = ("frequency", "reduce_on_plateau", "monitor", "strict")


def parse_optimizers(output: Any, automatic: bool = True) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """Turn what ``configure_optimizers`` returned into optimizers and scheduler configs.

    Args:
        output: What ``configure_optimizers`` returned.
        automatic: Whether the Trainer steps the schedulers (automatic optimization). In manual
            optimization the module steps them: a ReduceLROnPlateau needs no ``monitor`` then, and
            the keys only the Trainer's stepping reads (``frequency``, ``monitor``, ``strict``) are
            ignored, with a warning naming them.

    Raises:
        MisconfigurationError: The value has none of the accepted forms (listed in the message).
    """
    if isinstance(output, Optimizer):
        return [output], []
    if isinstance(output, Mapping):
        return _from_dicts([output], automatic)
    if isinstance(output, (list, tuple)):
        if len(output) == 2 and isinstance(output[0], (list, tuple)) and isinstance(output[1], (list, tuple)):
            optimizers = list(output[0])
            _check_optimizers(optimizers)
            return optimizers, [_scheduler_config(s, automatic) for s in output[1]]
        if output and all(isinstance(o, Mapping) for o in output):
            return _from_dicts(list(output), automatic)
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


def _from_dicts(items: list[Mapping[str, Any]], automatic: bool) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
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
            scheduler, monitor = item["lr_scheduler"], item.get("monitor")
            if monitor is not None:  # Lightning's {"optimizer", "lr_scheduler", "monitor"}: the dict's own one wins
                scheduler = {
                    "monitor": monitor,
                    **(scheduler if isinstance(scheduler, Mapping) else {"scheduler": scheduler}),
                }
            config = _scheduler_config(scheduler, automatic)
            config.monitor = config.monitor or monitor
            configs.append(config)
    _check_optimizers(optimizers)
    return optimizers, configs


def _scheduler_config(value: Any, automatic: bool) -> LRSchedulerConfig:
    if isinstance(value, Mapping):
        unknown = set(value) - _SCHEDULER_KEYS
        if "scheduler" not in value or unknown:
            raise MisconfigurationError(
                f"lr_scheduler dict has keys {sorted(value)}; expected 'scheduler' and optionally "
                f"{', '.join(sorted(_SCHEDULER_KEYS - {'scheduler'}))}."
            )
        config = LRSchedulerConfig(**value)
        ignored = [key for key in _AUTOMATIC_ONLY_KEYS if key in value]
        if ignored and not automatic:
            rank_zero_warn(
                f"The lr_scheduler dict of {type(config.scheduler).__name__} sets {', '.join(ignored)}, which "
                "manual optimization ignores: the Trainer does not step its schedulers then. Hint: call "
                "scheduler.step() yourself in training_step or an epoch hook (self.lr_schedulers()), and "
                "remove those keys.",
                category=RuntimeWarning,
            )
    else:
        config = LRSchedulerConfig(value)
    if config.interval not in ("epoch", "step"):
        raise MisconfigurationError(f"lr_scheduler interval={config.interval!r}: choose 'epoch' or 'step'.")
    if isinstance(config.frequency, bool) or not isinstance(config.frequency, int) or config.frequency < 1:
        raise MisconfigurationError(f"lr_scheduler frequency={config.frequency!r}: give a positive int.")
    if not isinstance(config.strict, bool):
        raise MisconfigurationError(
            f"lr_scheduler strict={config.strict!r} is not valid: give True (a missing monitored metric is an "
            "error) or False (the step is skipped with a warning). Hint: write the bool itself, not a string."
        )
    if automatic and config.reduce_on_plateau and config.monitor is None:
        raise MisconfigurationError(
            "ReduceLROnPlateau needs a metric: return {'optimizer': opt, 'lr_scheduler': "
            "{'scheduler': sched, 'monitor': 'val_loss'}}."
        )
    return config


def _check_schedulers(
    optimizers: list[Optimizer], configs: list[LRSchedulerConfig], module: Any, saves_checkpoints: bool
) -> None:
    """Refuse a scheduler that could never step, or that steps an optimizer the Trainer does not use.

    Raises:
        MisconfigurationError: A scheduler class (or another object) without a ``step()`` the default
            ``lr_scheduler_step`` could call, one without ``state_dict()``/``load_state_dict()`` in a
            run that saves checkpoints (without them: a warning), or a scheduler of another optimizer.
    """
    from torchplug.core.module import Module
    from torchplug.trainer.hooks import is_overridden

    custom_step = is_overridden(module, "lr_scheduler_step", Module)
    for config in configs:
        scheduler = config.scheduler
        name = scheduler.__name__ if isinstance(scheduler, type) else type(scheduler).__name__
        if isinstance(scheduler, type) or (not custom_step and not callable(getattr(scheduler, "step", None))):
            what = "the class, not a scheduler made from it" if isinstance(scheduler, type) else "no step() method"
            raise MisconfigurationError(
                f"lr_scheduler={scheduler!r} is not valid: it is {what}, so it could never step. Hint: return an "
                f"instance built on your optimizer ({name}(optimizer, ...)), or override lr_scheduler_step to step "
                "it yourself."
            )
        stateless = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(scheduler, m, None))]
        if stateless:
            message = (
                f"lr_scheduler={name} has no {' and no '.join(f'{m}()' for m in stateless)}, so no checkpoint "
                "can hold it and no resume restore it"
            )
            hint = (
                "Hint: give it state_dict() returning its state (a dict, {} when it has none) and "
                "load_state_dict(state), as torch's schedulers have."
            )
            if saves_checkpoints:
                raise MisconfigurationError(
                    f"{message}, and this run saves checkpoints (ModelCheckpoint). {hint} Or pass "
                    "enable_checkpointing=False."
                )
            rank_zero_warn(f"{message}: trainer.save_checkpoint() and the checkpoint of a SIGTERM will fail. {hint}")
        optimizer = getattr(scheduler, "optimizer", None)
        if isinstance(optimizer, Optimizer) and all(optimizer is not o for o in optimizers):
            raise MisconfigurationError(
                f"lr_scheduler={name} is not valid: it changes the learning rate of an optimizer that "
                f"configure_optimizers() did not return ({type(optimizer).__name__} at {id(optimizer):#x}), so "
                "it would change nothing the Trainer trains. Hint: build the scheduler on one of the returned "
                "optimizers."
            )


def configure_optimizers(trainer: Trainer) -> list[Optimizer]:
    """Call the module's ``configure_optimizers`` and keep the result on the Trainer (``trainer.optimizers``...).

    The strategy calls this once the parameters are in their final form (moved, sharded).

    Raises:
        MisconfigurationError: The return value has none of the accepted forms, or automatic
            optimization got several optimizers.
    """
    module = trainer.module
    optimizers, configs = parse_optimizers(module.configure_optimizers(), module.automatic_optimization)
    _check_schedulers(optimizers, configs, module, saves_checkpoints=bool(trainer.checkpoint_callbacks))
    trainer.optimizers, trainer.lr_scheduler_configs = optimizers, configs
    if module.automatic_optimization and len(trainer.optimizers) > 1:
        raise MisconfigurationError(
            f"configure_optimizers() returned {len(trainer.optimizers)} optimizers; automatic optimization steps "
            "one. Hint: set self.automatic_optimization = False and step them in training_step."
        )
    return trainer.optimizers
