"""Finding a run's dataloaders, splitting them over processes, and applying the ``limit_*`` arguments."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sized
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

from torchplug._errors import MisconfigurationError
from torchplug.utilities.rank_zero import rank_zero_warn

__all__ = ["as_list", "limit_batches", "num_batches", "with_distributed_sampler"]

# DataLoader arguments we carry over when rebuilding a loader with a DistributedSampler.
_LOADER_ARGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
)


def as_list(loaders: Any) -> list[Any]:
    """One dataloader or several, as a list (None and empty give an empty list)."""
    if loaders is None:
        return []
    if isinstance(loaders, (list, tuple)):
        return list(loaders)
    return [loaders]


def with_distributed_sampler(loader: Any, sampler_kwargs: dict[str, Any] | None, shuffle_default: bool) -> Any:
    """Rebuild a plain DataLoader so that each process reads its own shard of the data.

    A loader with a custom sampler, an iterable dataset, or anything that is not a DataLoader is
    returned as it is (its author already decides what each process reads).
    """
    if sampler_kwargs is None or not isinstance(loader, DataLoader):
        return loader
    sampler = loader.sampler
    if isinstance(sampler, DistributedSampler) or not isinstance(sampler, (RandomSampler, SequentialSampler)):
        return loader
    if loader.batch_size is None:  # a custom batch_sampler: leave it alone
        return loader
    shuffle = isinstance(sampler, RandomSampler) if sampler is not None else shuffle_default
    seed = int(os.environ.get("TORCHPLUG_GLOBAL_SEED", 0))
    distributed: DistributedSampler[Any] = DistributedSampler(
        loader.dataset, shuffle=shuffle, seed=seed, **sampler_kwargs
    )
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name)}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    try:
        return type(loader)(loader.dataset, batch_size=loader.batch_size, sampler=distributed, **kwargs)
    except TypeError:
        rank_zero_warn(
            f"Could not rebuild {type(loader).__name__} with a DistributedSampler; every process reads "
            "all the data. Hint: pass use_distributed_sampler=False and shard it yourself."
        )
        return loader


def num_batches(loader: Any) -> float:
    """The number of batches in ``loader``: ``inf`` when it has no length."""
    if isinstance(loader, Sized):
        try:
            return len(loader)
        except (TypeError, NotImplementedError):
            return math.inf
    return math.inf


def limit_batches(available: float, limit: int | float | None, name: str) -> float:
    """Apply ``limit_<stage>_batches`` (an int count, or a float fraction of the loader) to ``available``."""
    if limit is None:
        return available
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
        raise MisconfigurationError(f"{name}={limit!r}: give an int (batches) or a float between 0.0 and 1.0.")
    if isinstance(limit, int):
        return min(available, limit)
    if limit > 1.0:
        raise MisconfigurationError(f"{name}={limit!r}: a float is a fraction of the batches, at most 1.0.")
    if limit == 1.0:
        return available
    if math.isinf(available):
        raise MisconfigurationError(
            f"{name}={limit!r}: a fraction needs a dataloader with a length. Give an int number of batches instead."
        )
    limited = int(available * limit)
    if limited == 0 and limit > 0:
        raise MisconfigurationError(
            f"{name}={limit!r} of {available} batches is less than one batch. "
            f"Hint: use a larger fraction or an int such as {name}=1."
        )
    return limited


def check_iterable(loader: Any, what: str) -> Iterable[Any]:
    """Fail early, in the user's words, when a dataloader is not iterable."""
    if not isinstance(loader, Iterable):
        raise MisconfigurationError(
            f"{what} is a {type(loader).__name__}, not an iterable of batches (for example a torch DataLoader)."
        )
    return loader
