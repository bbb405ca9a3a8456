"""Checks of a run's configuration before it starts, and process-wide settings a run applies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug.core.module import Module
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.states import TrainerFn
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug.utilities.warn import warn_once

if TYPE_CHECKING:
    from torchplug.accelerators.accelerator import Accelerator

__all__ = [
    "BAREBONES_RESULTS",
    "apply_benchmark",
    "apply_deterministic",
    "convert_sync_batchnorm",
    "verify_loop_configuration",
]

_REQUIRED_STEP = {
    TrainerFn.FITTING: "training_step",
    TrainerFn.VALIDATING: "validation_step",
    TrainerFn.TESTING: "test_step",
}


def verify_loop_configuration(model: Module, fn: TrainerFn) -> None:
    """Refuse a run whose step the module does not define (the base class's would silently do nothing).

    A step set to None (``model.test_step = None``) counts as not defined; ``predict_step`` needs
    no override (its default calls the module), but None is refused.

    Raises:
        MisconfigurationError: Naming the missing method and the call that needs it.
    """
    step = _REQUIRED_STEP.get(fn)
    if step is not None and not is_overridden(model, step, Module):
        raise MisconfigurationError(
            f"trainer.{fn.value}() needs {type(model).__name__}.{step}(batch, batch_idx), which is not defined"
            f"{' (it is set to None)' if getattr(model, step, None) is None else ''}."
        )
    if fn is TrainerFn.PREDICTING and getattr(model, "predict_step", None) is None:
        raise MisconfigurationError(
            f"trainer.predict() needs {type(model).__name__}.predict_step, which is set to None. Hint: remove the "
            "assignment to use the default (self(batch)), or define predict_step(self, batch, batch_idx)."
        )
    if fn is TrainerFn.FITTING and not is_overridden(model, "configure_optimizers", Module):
        raise MisconfigurationError(
            f"trainer.fit() needs {type(model).__name__}.configure_optimizers(), which is not defined."
        )


def apply_deterministic(deterministic: bool | str, accelerator: Accelerator) -> None:
    """``Trainer(deterministic=...)``: torch's deterministic algorithms, and the accelerator's own settings."""
    import torch

    torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
    if deterministic:
        accelerator.deterministic_setup()  # device settings deterministic kernels need (cuBLAS workspace...)


def apply_benchmark(benchmark: bool | None, deterministic: bool | str | None, accelerator: Accelerator) -> None:
    """``Trainer(benchmark=...)``, asked of the accelerator; said aloud when the accelerator has no such setting.

    None leaves the accelerator's setting alone, except that ``deterministic=True`` turns it off.
    """
    if benchmark is None:
        if deterministic is True:
            accelerator.set_benchmark(False)
        return
    if benchmark and deterministic is True:
        rank_zero_warn(
            "benchmark=True with deterministic=True: tuned kernels may be chosen differently from run to run, so "
            "results may vary. Hint: pass benchmark=False (or leave it None) for reproducible runs."
        )
    if not accelerator.set_benchmark(benchmark):
        rank_zero_warn(
            f"benchmark={benchmark!r} has no effect on {type(accelerator).__name__}: it has no kernel tuning to switch."
        )


def convert_sync_batchnorm(module: Module, world_size: int = 1) -> None:
    """``Trainer(sync_batchnorm=True)``: every BatchNorm layer of ``module`` becomes a SyncBatchNorm, in place.

    Said once (it changes nothing, as in Lightning, where it is silent) when the module has no
    BatchNorm layer, or when the run has one process (``world_size=1``), which has no other
    process to share statistics with.
    """
    import torch

    if not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules()):
        warn_once(
            f"sync_batchnorm=True, but {type(module).__name__} has no BatchNorm layer: there is nothing to "
            "synchronise. Hint: drop sync_batchnorm=True."
        )
        return
    if world_size == 1:
        warn_once(
            "sync_batchnorm=True with one process (world size 1): there is no other process to share batch "
            "statistics with, so the layers compute as BatchNorm does. Hint: drop it, or train on several devices "
            "(devices=N with a parallel strategy)."
        )
    for name, child in list(module.named_children()):
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(child)
        if converted is not child:
            setattr(module, name, converted)


class _BarebonesResults:
    """What ``self.log`` reaches under ``Trainer(barebones=True)``: an error, since nothing is logged there."""

    def log(self, name: str, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationError(
            f"self.log({name!r}) under Trainer(barebones=True): barebones mode logs nothing. "
            "Hint: remove the self.log calls, or barebones=True."
        )


#: The metric store of a barebones run (see :class:`_BarebonesResults`).
BAREBONES_RESULTS: Any = _BarebonesResults()
