"""Copies of a model that leave the run it is attached to behind (for the weight-averaging callbacks)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

    from torchplug.trainer.trainer import Trainer

__all__ = ["copy_module", "refuse_sharded"]

M = TypeVar("M", bound="torch.nn.Module")


def copy_module(module: M, trainer: Trainer) -> M:
    """A deep copy of ``module``'s layers, parameters and buffers, without the Trainer run it is attached to.

    A torchplug Module leaves its Trainer, metric store and optimizers out of deep copies by
    itself; for other modules, the Trainer, its strategy and optimizers are left out here too.
    """
    memo: dict[int, Any] = {id(trainer): None, id(trainer.strategy): None}
    for optimizer in trainer.optimizers:
        memo[id(optimizer)] = None
    return copy.deepcopy(module, memo)


def refuse_sharded(module: torch.nn.Module, who: str) -> None:
    """Raise when ``module``'s parameters are sharded across processes (tensor subclasses such as DTensor).

    Raises:
        MisconfigurationError: Naming ``who`` and the first sharded parameter.
    """
    import torch

    from torchplug._errors import MisconfigurationError

    for name, param in module.named_parameters():
        if type(param.data) is not torch.Tensor:
            raise MisconfigurationError(
                f"{who} averages whole parameters, but {name!r} is a {type(param.data).__name__} (a sharded "
                "strategy such as fsdp). Hint: use strategy='ddp' (or a single device) with weight averaging."
            )
