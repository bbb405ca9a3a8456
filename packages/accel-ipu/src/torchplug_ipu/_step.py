"""What PopTorch compiles: one of the user's step methods as a module, and its inputs as tensors."""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from torchplug import MisconfigurationError, Precision
from torchplug_ipu import _vendor

__all__ = ["StepModule", "micro_batches", "tensor_arguments"]


class StepModule(torch.nn.Module):
    """Runs ``module.<step_name>(...)`` under the precision's forward context; PopTorch compiles this.

    For ``training_step`` the loss is marked as the value PopTorch differentiates
    (``poptorch.identity_loss``), so backward and the optimizer step happen inside the compiled
    step, on the IPU.

    Args:
        module: The user's Module (its parameters are this module's parameters).
        step_name: ``"training_step"``, ``"validation_step"``, ``"test_step"`` or ``"predict_step"``.
        precision: The precision plugin whose forward context shapes the compiled graph.
    """

    def __init__(self, module: torch.nn.Module, step_name: str, precision: Precision) -> None:
        super().__init__()
        self.module = module
        self.step_name = step_name
        self._precision = precision

    @override
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._precision.forward_context():
            output = getattr(self.module, self.step_name)(*args, **kwargs)
        if self.step_name != "training_step":
            return output
        loss = output.get("loss") if isinstance(output, dict) else output
        if not isinstance(loss, torch.Tensor):
            raise MisconfigurationError(
                f"training_step returned {type(output).__name__}; on IPUs it must return the loss (a tensor, or a "
                "dict with 'loss'): the backward pass and the optimizer step are compiled into the step, so a batch "
                "cannot be skipped by returning None."
            )
        return _vendor.import_poptorch().identity_loss(loss, reduction="none")


def micro_batches(options: Any) -> int:
    """How many micro-batches one call of a model compiled with ``options`` consumes."""
    return int(options.device_iterations * options.replication_factor * options.Training.gradient_accumulation)


def tensor_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], count: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn the int arguments (``batch_idx``, ``dataloader_idx``) into tensors of ``count`` equal entries.

    PopTorch passes only tensors to a compiled model, and splits each along its first dimension
    into the ``count`` micro-batches of one call: each micro-batch then sees a one-element tensor.
    """

    def convert(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return torch.full((count,), value, dtype=torch.int32)
        return value

    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}
