"""Rebuilding the user's DataLoader as a ``poptorch.DataLoader``, which batches for the whole IPU step.

One call of a compiled PopTorch model consumes ``device_iterations x replication_factor x
gradient_accumulation`` micro-batches at once, so the loader must yield batches that large.
``poptorch.DataLoader`` does that from the user's ``batch_size`` and the ``poptorch.Options``.
No DistributedSampler is ever involved: the replicas split each combined batch on the IPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from torchplug import MisconfigurationError
from torchplug_ipu import _vendor

__all__ = ["poptorch_loader"]

#: DataLoader arguments carried over to the poptorch.DataLoader.
_LOADER_ARGS: Final = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
)


def poptorch_loader(loader: Iterable[Any], options: Any) -> Iterable[Any]:
    """``loader`` as a ``poptorch.DataLoader`` built with ``options`` (a loader that is one already is kept).

    The dataset, the batch size (per replica and micro-batch), shuffling, ``drop_last`` and the
    worker settings are kept; a custom sampler is passed on as it is.

    Raises:
        MisconfigurationError: ``loader`` is not a torch DataLoader, or has a custom batch sampler
            (whose batches PopTorch cannot combine).
    """
    poptorch = _vendor.import_poptorch()
    if isinstance(loader, poptorch.DataLoader):
        return loader  # type: ignore[no-any-return]
    if not isinstance(loader, DataLoader):
        raise MisconfigurationError(
            f"accelerator='ipu' reads data through poptorch.DataLoader, and cannot rebuild a "
            f"{type(loader).__name__}. Hint: pass a torch.utils.data.DataLoader, or a poptorch.DataLoader built "
            "with trainer.strategy.training_options."
        )
    if loader.batch_size is None:
        raise MisconfigurationError(
            "accelerator='ipu' combines batch_size-sized batches for each IPU step, but this DataLoader has a "
            "custom batch_sampler. Hint: give the DataLoader a batch_size, or pass a poptorch.DataLoader "
            "built with trainer.strategy.training_options."
        )
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name)}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
    sampler = loader.sampler
    shuffle = isinstance(sampler, RandomSampler)
    if not isinstance(sampler, (RandomSampler, SequentialSampler)) and not _is_iterable(loader):
        kwargs["sampler"] = sampler
    return poptorch.DataLoader(  # type: ignore[no-any-return]
        options,
        loader.dataset,
        batch_size=loader.batch_size,
        shuffle=shuffle,
        drop_last=loader.drop_last,
        **kwargs,
    )


def _is_iterable(loader: DataLoader[Any]) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(loader.dataset, IterableDataset)
