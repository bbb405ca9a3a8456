"""The first training batch of a multi-process fit, compared across processes: unsharded data is said.

Under data parallelism every process must train on other samples. A map-style dataset gets a
``DistributedSampler`` (``use_distributed_sampler=True``), but an ``IterableDataset`` must shard
itself, and a loader built with its own sampler under ``use_distributed_sampler=False`` may not:
then every process trains on the same batches, the effective batch holds each sample N times and
an epoch is N times shorter than it looks, with no error anywhere. One fingerprint per process of
the first batch, gathered once per ``fit``, finds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug.strategies.strategy import Strategy

__all__ = ["warn_if_every_process_got_the_same_batch"]

#: Elements of each tensor that go into the position-weighted part of the fingerprint.
_SAMPLED = 4096


def _fingerprint(batch: Any) -> torch.Tensor:
    """Two float64 numbers that differ between two batches with different contents (nan: no tensor in it)."""
    tensors: list[torch.Tensor] = []

    def collect(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                collect(item)

    collect(batch)
    if not tensors:
        return torch.full((2,), float("nan"), dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64)
    weighted = torch.zeros((), dtype=torch.float64)
    for tensor in tensors:
        flat = tensor.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        total += flat.sum(dtype=torch.float64).to("cpu")  # summed where it is, without a float64 copy
        head = flat[:_SAMPLED].to("cpu", torch.float64)
        weighted += (head * torch.arange(1, head.numel() + 1, dtype=torch.float64)).sum()
    return torch.stack([total, weighted])


def warn_if_every_process_got_the_same_batch(strategy: Strategy, iterator: Iterator[Any]) -> Iterator[Any]:
    """Peek at the first batch, compare it across the processes (one all_gather), return the whole iterator.

    Every process calls it at the same point (the start of a fit's first epoch). A process whose
    loader is empty takes part with a fingerprint that matches nothing.
    """
    try:
        first = next(iterator)
    except StopIteration:
        rest: Iterator[Any] = iterator
        fingerprint = torch.full((2,), float("nan"), dtype=torch.float64)
    else:
        rest = itertools.chain([first], iterator)
        fingerprint = _fingerprint(first)
    # float32 on the wire: every backend gathers it (XLA and others emulate float64, if at all).
    gathered = strategy.all_gather(fingerprint.to(strategy.root_device, torch.float32)).to("cpu")
    values = gathered.reshape(-1, 2)
    every = values.shape[0] == strategy.world_size  # (a strategy whose all_gather returned less: no verdict)
    if every and bool(torch.isfinite(values).all()) and bool((values == values[0]).all()):
        from torchplug.utilities.warnings import PossibleUserWarning  # a module of its own: loaded when it warns

        rank_zero_warn(
            f"Every one of the {strategy.world_size} processes got the same first training batch: the data is not "
            "sharded, so each process trains on all of it (every sample counts world_size times, and an epoch "
            "repeats the data world_size times over). An IterableDataset must shard itself (by "
            "torch.distributed.get_rank() and get_world_size(), e.g. datasets' split_dataset_by_node); a "
            "DataLoader with use_distributed_sampler=False needs a DistributedSampler. Hint: if each process "
            "should see the same data, this warning can be ignored.",
            category=PossibleUserWarning,
        )
    return rest
