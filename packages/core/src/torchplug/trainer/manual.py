"""Optimizers for manual optimization: ``step()`` goes through the strategy and precision plugins."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["ManualOptimizer"]


class ManualOptimizer:
    """Wraps an optimizer for ``automatic_optimization = False``: use it like the optimizer itself.

    ``step()`` applies loss scaling and counts a global step; every other attribute is the
    wrapped optimizer's.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, trainer: Trainer) -> None:
        self.optimizer = optimizer
        self._trainer = trainer

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision plugin (a scaler unscales and may skip), and count a global step."""
        trainer = self._trainer
        output = trainer.strategy.optimizer_step(self.optimizer, closure)
        trainer.fit_loop.progress.global_step += 1
        return output

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of the wrapped optimizer's parameters."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)
