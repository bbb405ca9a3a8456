"""Strategies of the original plugin documentation that are not provided, each refused with the reason and what to use.

``strategy="ddp2"`` and fairscale's ``"ddp_sharded"``, ``"ddp_sharded_spawn"`` and
``"ddp_fully_sharded"`` are registered names, so that ``core plugins list``
shows them (as unavailable, with the reason) and asking for one raises
:class:`~torchplug.MisconfigurationError` (``core fit`` exits 2, without a traceback) that names
the replacement, instead of "unknown strategy". ``"dp"`` is not registered (one letter from ``"ddp"``, it
would be suggested for every misspelt ``"ddp"``): it is an unknown name whose error suggests
``"ddp"``, and :class:`DataParallelStrategy` raises with the reason. This module imports no torch.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from typing_extensions import Self

from torchplug._errors import MisconfigurationError
from torchplug.strategies.strategy import Strategy

__all__ = [
    "DDP2Strategy",
    "DDPFullyShardedStrategy",
    "DDPShardedStrategy",
    "DDPSpawnShardedStrategy",
    "DataParallelStrategy",
]

DDP2_REASON: Final = (
    "strategy='ddp2' was removed from PyTorch Lightning in 1.7 and is not provided: it ran DataParallel inside "
    "each node (one process driving every GPU of the node) and DDP between nodes, which is slower than DDP "
    "everywhere. Hint: use strategy='ddp' (one process per device, on every node)."
)

DP_REASON: Final = (
    "strategy='dp' (torch.nn.DataParallel: one process driving every GPU of the node with threads, the model "
    "copied to each GPU at every step) is not provided: torch recommends DistributedDataParallel over "
    "DataParallel even on a single node, and DataParallel runs on CUDA only. Hint: use strategy='ddp' "
    "(or 'ddp_notebook' in a notebook)."
)


_FAIRSCALE: Final = (
    "was fairscale's {what}; fairscale is no longer maintained and its sharding became torch's FSDP, so it is not "
    "provided. Hint: use strategy='fsdp' (torch FSDP2){how}."
)

SHARDED_REASONS: Final = {
    "ddp_sharded": "strategy='ddp_sharded' "
    + _FAIRSCALE.format(
        what="sharded DDP (optimizer state and gradients sharded, parameters replicated)",
        how="; FSDPStrategy(reshard_after_forward=False) keeps the parameters gathered between forward and "
        "backward, as this ZeRO-2-style sharding did",
    ),
    "ddp_sharded_spawn": "strategy='ddp_sharded_spawn' "
    + _FAIRSCALE.format(
        what="sharded DDP started with spawn",
        how="; FSDPStrategy(start_method='spawn') starts its processes the same way",
    ),
    "ddp_fully_sharded": "strategy='ddp_fully_sharded' "
    + _FAIRSCALE.format(what="fully sharded data parallel", how=", which shards parameters too"),
}


class _Refused(Strategy):
    """A strategy name that is kept only to explain why it is not provided."""

    reason: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        """Raise :class:`~torchplug.MisconfigurationError` with :attr:`reason`; nothing is created."""
        raise MisconfigurationError(cls.reason)


class DDP2Strategy(_Refused):
    """``strategy="ddp2"``: removed from the field (DataParallel in a node, DDP across); raises, naming ``ddp``."""

    reason: ClassVar[str] = DDP2_REASON


class DataParallelStrategy(_Refused):
    """``strategy="dp"``: ``torch.nn.DataParallel`` is not provided; raises, naming ``ddp``."""

    reason: ClassVar[str] = DP_REASON


class DDPShardedStrategy(_Refused):
    """``strategy="ddp_sharded"`` (fairscale): not provided; raises, naming ``fsdp``."""

    reason: ClassVar[str] = SHARDED_REASONS["ddp_sharded"]


class DDPSpawnShardedStrategy(_Refused):
    """``strategy="ddp_sharded_spawn"`` (fairscale): not provided; raises, naming ``fsdp``."""

    reason: ClassVar[str] = SHARDED_REASONS["ddp_sharded_spawn"]


class DDPFullyShardedStrategy(_Refused):
    """``strategy="ddp_fully_sharded"`` (fairscale's FSDP): not provided; raises, naming ``fsdp``."""

    reason: ClassVar[str] = SHARDED_REASONS["ddp_fully_sharded"]


def sharded_probe() -> str:
    """The registry probe of the fairscale names: the reason they are not provided (the same for the three)."""
    return (
        "fairscale's sharded strategies are not provided (fairscale is no longer maintained; its sharding became "
        "torch's FSDP). Hint: use strategy='fsdp'."
    )


def ddp2_probe() -> str:
    """The registry probe of ``ddp2``: always the reason it is not provided."""
    return DDP2_REASON
