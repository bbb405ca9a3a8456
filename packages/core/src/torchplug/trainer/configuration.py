"""Checks of a run's configuration before it starts, and process-wide settings a run applies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug._errors import MisconfigurationError
from torchplug.core.module import Module
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.states import TrainerFn

if TYPE_CHECKING:
    from torchplug.accelerators.accelerator import Accelerator

__all__ = ["apply_deterministic", "verify_loop_configuration"]

_REQUIRED_STEP = {
    TrainerFn.FITTING: "training_step",
    TrainerFn.VALIDATING: "validation_step",
    TrainerFn.TESTING: "test_step",
}


def verify_loop_configuration(model: Module, fn: TrainerFn) -> None:
    """Refuse a run whose step the module does not define (the base class's would silently do nothing).

    Raises:
        MisconfigurationError: Naming the missing method and the call that needs it.
    """
    step = _REQUIRED_STEP.get(fn)
    if step is not None and not is_overridden(model, step, Module):
        raise MisconfigurationError(
            f"trainer.{fn.value}() needs {type(model).__name__}.{step}(batch, batch_idx), which is not defined."
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
