"""A run's data: the dataloaders, their shards, the ``limit_*`` arguments, and each batch's way to the device."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.states import TrainerFn
from torchplug.utilities.apply import move_to_device
from torchplug.utilities.combined_loader import CombinedLoader
from torchplug.utilities.env_vars import env_int
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug.utilities.seed import worker_init_function, workers_seeded

if TYPE_CHECKING:
    from torchplug.strategies.strategy import Strategy
    from torchplug.trainer.trainer import Trainer

__all__ = [
    "DataConnector",
    "DistributedSamplerWrapper",
    "IndexBatchSampler",
    "UnrepeatedDistributedSampler",
    "as_list",
    "batch_transfer",
    "check_iterable",
    "data_sources",
    "limit_batches",
    "num_batches",
    "with_batch_indices",
    "with_distributed_sampler",
    "with_seeded_workers",
]

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


def as_list(loaders: Any, what: str = "dataloaders") -> list[Any]:
    """The evaluation dataloaders given as ``what``, as a list (None and empty give an empty list).

    One loader, a list or tuple of them, a dict of them (its values, in order: ``dataloader_idx``
    counts them, as in Lightning), or a ``CombinedLoader(mode="sequential")`` (its loaders).

    Raises:
        MisconfigurationError: A CombinedLoader in another mode: evaluation reads its loaders one after
            the other, so batches zipped across loaders cannot be evaluated.
    """
    if loaders is None:
        return []
    if isinstance(loaders, CombinedLoader):
        if loaders.mode != "sequential":
            raise MisconfigurationError(
                f"{what}=CombinedLoader(mode={loaders.mode!r}) is not valid: evaluation runs each dataloader in "
                "turn, with its dataloader_idx. Hint: pass CombinedLoader(..., mode='sequential'), or the "
                "dataloaders themselves (a list or a dict)."
            )
        return loaders.flattened
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return list(loaders)
    return [loaders]


def with_distributed_sampler(
    loader: Any, sampler_kwargs: dict[str, Any] | None, shuffle_default: bool, unrepeated: bool = False
) -> Any:
    """Rebuild a DataLoader so that each process reads its own shard of the data (``use_distributed_sampler``).

    As in Lightning: a ``RandomSampler`` or ``SequentialSampler`` becomes a ``DistributedSampler``
    (shuffling as the sampler did); a custom sampler (a ``WeightedRandomSampler``...) is wrapped in a
    :class:`DistributedSamplerWrapper`, which gives each process its share of what the sampler yields;
    a ``BatchSampler`` (or a subclass that takes ``(sampler, batch_size, drop_last)``) is rebuilt
    around such a sampler. A loader that already has a ``DistributedSampler``, an iterable dataset, or
    anything that is not a DataLoader is returned as it is. ``unrepeated``: shards without repeated
    samples (:class:`UnrepeatedDistributedSampler`), for ``predict``.

    Raises:
        MisconfigurationError: A custom batch sampler that cannot be rebuilt around another sampler:
            every process would read all the data.
    """
    if sampler_kwargs is None or not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    batch_sampler = loader.batch_sampler
    if batch_sampler is not None and loader.batch_size is None:  # a batch sampler of the user's own
        return _with_distributed_batch_sampler(loader, batch_sampler, sampler_kwargs, unrepeated)
    distributed = _distributed(loader.sampler, loader.dataset, sampler_kwargs, shuffle_default, unrepeated)
    if distributed is None:
        return loader
    kwargs = _loader_kwargs(loader, keep_drop_last=True)
    try:
        return type(loader)(loader.dataset, batch_size=loader.batch_size, sampler=distributed, **kwargs)
    except TypeError:
        rank_zero_warn(
            f"Could not rebuild {type(loader).__name__} with a DistributedSampler; every process reads "
            "all the data. Hint: pass use_distributed_sampler=False and shard it yourself."
        )
        return loader


def with_seeded_workers(loader: Any, rank: int) -> Any:
    """``loader`` seeding its workers by rank (:func:`~torchplug.utilities.seed.worker_init_function`).

    Used after ``seed_everything(workers=True)``. Only a DataLoader with workers and no
    ``worker_init_fn`` of its own gets it (the user's function is kept, as in Lightning). The loader
    is copied, not changed: the caller's object stays as given.
    """
    if not isinstance(loader, DataLoader) or loader.num_workers == 0 or loader.worker_init_fn is not None:
        return loader
    seeded = copy.copy(loader)
    seeded.worker_init_fn = functools.partial(worker_init_function, rank=rank)
    return seeded


def _distributed(
    sampler: Any, dataset: Any, sampler_kwargs: dict[str, Any], shuffle_default: bool, unrepeated: bool
) -> Sampler[Any] | None:
    """The sampler of this process's shard in place of ``sampler``; None when ``sampler`` already shards."""
    if isinstance(sampler, (DistributedSampler, DistributedSamplerWrapper)):
        return None
    seed = env_int("TORCHPLUG_GLOBAL_SEED", 0, minimum=0, maximum=2**32 - 1)
    if isinstance(sampler, (RandomSampler, SequentialSampler)) or sampler is None:
        shuffle = isinstance(sampler, RandomSampler) if sampler is not None else shuffle_default
        sampler_class = UnrepeatedDistributedSampler if unrepeated else DistributedSampler
        distributed: DistributedSampler[Any] = sampler_class(dataset, shuffle=shuffle, seed=seed, **sampler_kwargs)
        return distributed
    return DistributedSamplerWrapper(sampler, unrepeated=unrepeated, seed=seed, **sampler_kwargs)


def _loader_kwargs(loader: DataLoader[Any], keep_drop_last: bool) -> dict[str, Any]:
    """The DataLoader arguments carried over to a rebuilt loader."""
    kwargs = {
        name: getattr(loader, name)
        for name in _LOADER_ARGS
        if hasattr(loader, name) and (keep_drop_last or name != "drop_last")
    }
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return kwargs


def _with_distributed_batch_sampler(
    loader: DataLoader[Any], batch_sampler: Any, sampler_kwargs: dict[str, Any], unrepeated: bool
) -> Any:
    """``loader`` with its custom batch sampler rebuilt around this process's shard of its sampler."""
    name = type(batch_sampler).__name__
    hint = (
        f"Hint: make {name} a torch BatchSampler that takes (sampler, batch_size, drop_last), or pass "
        "Trainer(use_distributed_sampler=False) and give each process its shard in the batch sampler yourself."
    )
    if not isinstance(batch_sampler, BatchSampler):
        raise MisconfigurationError(
            f"use_distributed_sampler=True cannot shard the batches of {type(loader).__name__}(batch_sampler={name}"
            f"(...)): {name} is not a torch BatchSampler, so there is no sampler to give each process its own "
            f"shard, and every process would read all the data. {hint}"
        )
    distributed = _distributed(batch_sampler.sampler, loader.dataset, sampler_kwargs, False, unrepeated)
    if distributed is None:
        return loader
    try:
        rebuilt = type(batch_sampler)(
            distributed, batch_size=batch_sampler.batch_size, drop_last=batch_sampler.drop_last
        )
        return type(loader)(loader.dataset, batch_sampler=rebuilt, **_loader_kwargs(loader, keep_drop_last=False))
    except TypeError as exc:
        raise MisconfigurationError(
            f"use_distributed_sampler=True cannot shard the batches of {type(loader).__name__}(batch_sampler={name}"
            f"(...)): rebuilding {name}(sampler, batch_size=..., drop_last=...) around a distributed sampler "
            f"failed ({exc}), and every process would read all the data. {hint}"
        ) from exc


class _SamplerPositions(Dataset[int]):
    """The positions in a sampler's output, as a dataset that a DistributedSampler can split."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, position: int) -> int:
        return position


class DistributedSamplerWrapper(Sampler[Any]):
    """This process's share of what a custom sampler yields: items ``rank, rank + n, ...`` of each pass.

    The sampler runs in every process (its own random draws, for a ``WeightedRandomSampler``; the
    same draws where every process seeds alike) and keeps its order: the positions are split
    without shuffling, padded with repeats to equal shares (or never repeated with
    ``unrepeated=True``, for ``predict``), as a DistributedSampler splits a dataset.

    Args:
        sampler: The sampler to share out (it must have a length).
        num_replicas: The number of processes.
        rank: This process's global rank.
        unrepeated: Shares that differ by at most one item instead of padded ones.
        seed: Passed to the DistributedSampler that splits the positions.
    """

    def __init__(self, sampler: Any, num_replicas: int, rank: int, unrepeated: bool = False, seed: int = 0) -> None:
        self.sampler = sampler
        positions_class = UnrepeatedDistributedSampler if unrepeated else DistributedSampler
        self._positions: DistributedSampler[Any] = positions_class(
            _SamplerPositions(sampler), num_replicas=num_replicas, rank=rank, shuffle=False, seed=seed
        )

    def __iter__(self) -> Iterator[Any]:
        items = list(self.sampler)
        return iter([items[position] for position in self._positions])

    def __len__(self) -> int:
        return len(self._positions)

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to the wrapped sampler, where it takes one."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


class UnrepeatedDistributedSampler(DistributedSampler[Any]):
    """A DistributedSampler that never repeats a sample: process ``r`` reads samples ``r, r + n, r + 2n...``.

    torch's DistributedSampler pads the shards to equal length with repeated samples, which would
    write some predictions twice; here the shards differ by at most one sample instead (used for
    ``predict``, where every process runs its own loop and nothing waits for the others per batch).
    """

    def __init__(self, dataset: Any, num_replicas: int, rank: int, shuffle: bool = False, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.total_size = len(dataset)
        self.num_samples = len(range(rank, self.total_size, num_replicas))

    @override
    def __iter__(self) -> Iterator[Any]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            indices: list[int] = torch.randperm(self.total_size, generator=generator).tolist()
        else:
            indices = list(range(self.total_size))
        return iter(indices[self.rank : self.total_size : self.num_replicas])


class IndexBatchSampler:
    """Wraps a DataLoader's batch sampler and records the dataset indices of every batch it yields.

    ``seen_batch_indices[i]`` holds the indices of batch ``i`` of the current pass, also when
    worker processes make the sampler run ahead of the batches delivered.

    Args:
        batch_sampler: The batch sampler to wrap.
    """

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        self.batch_sampler = batch_sampler
        self.seen_batch_indices: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        self.seen_batch_indices = []
        for batch in self.batch_sampler:
            self.seen_batch_indices.append(list(batch))
            yield batch

    def __len__(self) -> int:
        return len(cast("Sized", self.batch_sampler))  # a sized batch sampler, as DataLoader requires


def with_batch_indices(loader: Any) -> Any:
    """Rebuild a DataLoader so that its batch sampler records each batch's dataset indices (:class:`IndexBatchSampler`).

    Anything else (an iterable dataset, a loader without automatic batching, not a DataLoader) is
    returned as it is: its batches have no indices to record.
    """
    if (
        not isinstance(loader, DataLoader)
        or loader.batch_sampler is None
        or isinstance(loader.dataset, IterableDataset)
    ):
        return loader
    if isinstance(loader.batch_sampler, IndexBatchSampler):
        return loader
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name) and name != "drop_last"}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    try:
        return type(loader)(loader.dataset, batch_sampler=IndexBatchSampler(loader.batch_sampler), **kwargs)
    except TypeError:
        rank_zero_warn(
            f"Could not rebuild {type(loader).__name__} to record the indices of its batches; prediction writers "
            "receive batch_indices=None for it."
        )
        return loader


def sequential(loader: Any, what: str) -> Any:
    """``loader`` reading its data in order (``overfit_batches``): a DataLoader with another sampler is rebuilt.

    As in Lightning, any sampler but a ``SequentialSampler`` (a shuffling one, a ``WeightedRandomSampler``...)
    gives way to one, with a warning naming it; run before the distributed sampler is added, so that
    each process's shard stays in order too.
    """
    if (
        not isinstance(loader, DataLoader)
        or isinstance(loader.sampler, SequentialSampler)
        or isinstance(loader.dataset, IterableDataset)
        or loader.batch_size is None
    ):
        return loader
    rank_zero_warn(
        f"overfit_batches is set, so the {what} are read in order: their {type(loader.sampler).__name__} is "
        "replaced by a SequentialSampler (their shuffling is turned off)."
    )
    kwargs = _loader_kwargs(loader, keep_drop_last=True)
    return type(loader)(loader.dataset, batch_size=loader.batch_size, shuffle=False, **kwargs)


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


def _data_hook(module: Module, datamodule: DataModule | None, name: str) -> Callable[..., Any] | None:
    """The DataModule's override of a batch hook (it wins), else the module's, else None."""
    if datamodule is not None and is_overridden(datamodule, name, DataModule):
        hook: Callable[..., Any] = getattr(datamodule, name)
        return hook
    return getattr(module, name) if is_overridden(module, name, Module) else None


def data_sources(fn: str, name: str, loaders: Any, datamodule: DataModule | None) -> tuple[Any, DataModule | None]:
    """The dataloaders and the DataModule of ``trainer.<fn>(...)``: a DataModule in ``name``'s place is the DataModule.

    Raises:
        MisconfigurationError: Dataloaders (or a second DataModule) given beside ``datamodule``: one
            of the two would be silently ignored.
    """
    if loaders is not None and datamodule is not None:
        raise MisconfigurationError(
            f"trainer.{fn}({name}={type(loaders).__name__}, datamodule={type(datamodule).__name__}) gives two "
            "sources of data, and one of them would be ignored. Hint: pass the dataloaders or the DataModule, not "
            "both (a DataModule's dataloaders come from its *_dataloader() methods)."
        )
    if isinstance(loaders, DataModule):
        return None, loaders
    return loaders, datamodule


def batch_transfer(
    strategy: Strategy, module: Module, datamodule: DataModule | None, dataloader_idx: int
) -> Callable[[Any], Any]:
    """The function that brings one batch from the loader to the device, decided once per loop.

    In order: the precision's ``convert_input`` (where it converts), ``on_before_batch_transfer``,
    the move (a strategy's own ``batch_to_device``, else the module's ``transfer_batch_to_device``
    override, else every tensor to the root device), ``on_after_batch_transfer``. Each hook runs
    only where a DataModule or the module overrides it.
    """
    device = strategy.root_device
    precision = strategy.precision
    convert = (
        precision.convert_input
        if precision is not None and is_overridden(precision, "convert_input", Precision)
        else None
    )
    before = _data_hook(module, datamodule, "on_before_batch_transfer")
    after = _data_hook(module, datamodule, "on_after_batch_transfer")
    user_move = _data_hook(module, datamodule, "transfer_batch_to_device")
    move: Callable[[Any], Any]
    if is_overridden(strategy, "batch_to_device", Strategy):
        if user_move is not None:
            raise MisconfigurationError(
                f"transfer_batch_to_device is overridden, but {type(strategy).__name__} moves batches itself "
                "(it overrides batch_to_device). Hint: remove the override, or use a strategy that leaves the "
                "transfer to the model."
            )
        move, convert = strategy.batch_to_device, None  # the strategy's move converts by its contract
    elif user_move is not None:
        move = functools.partial(_call_transfer, user_move, device, dataloader_idx)
    else:
        move = functools.partial(move_to_device, device=device)
    if convert is None and before is None and after is None:
        return move

    def transfer(batch: Any) -> Any:
        if convert is not None:
            batch = convert(batch)
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = move(batch)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch

    return transfer


def _call_transfer(hook: Callable[..., Any], device: Any, dataloader_idx: int, batch: Any) -> Any:
    return hook(batch, device, dataloader_idx)


_PREFIX = {TrainerFn.VALIDATING: "val", TrainerFn.TESTING: "test", TrainerFn.PREDICTING: "predict"}


class DataConnector:
    """Finds and prepares a run's dataloaders: from ``fit(...)`` arguments, else the DataModule, else the module.

    Args:
        trainer: The Trainer whose strategy shards and adapts the loaders.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self.train_loader: Any = None
        self.num_training_batches: float = math.inf
        self.val_loaders: list[Any] = []
        self.num_val_batches: list[float] = []
        self.eval_batches: dict[TrainerFn, list[float]] = {}
        self._fit_given: tuple[Any, Any] = (None, None)
        self._train_ready = self._val_ready = True  # nothing pending before the first fit

    def prepare_data(self) -> None:
        """Run ``prepare_data`` of the DataModule and the module on each node's local rank 0, then wait for it."""
        trainer = self._trainer
        strategy = trainer.strategy
        if strategy.local_rank == 0:
            for owner, base in ((trainer.datamodule, DataModule), (trainer.module, Module)):
                if owner is not None and is_overridden(owner, "prepare_data", base):
                    owner.prepare_data()
        strategy.barrier("prepare_data")

    def source(self, hook: str) -> Any:
        """What the DataModule's (else the module's) ``hook`` returns, or None when neither defines it."""
        trainer = self._trainer
        for owner, base in ((trainer.datamodule, DataModule), (trainer.module, Module)):
            if owner is not None and is_overridden(owner, hook, base):
                return getattr(owner, hook)()
        return None

    def process(self, loader: Any, what: str, shuffle_default: bool, unrepeated: bool = False) -> Any:
        """Check ``loader``, give each process its shard (``use_distributed_sampler``), let the strategy adapt it."""
        trainer = self._trainer
        check_iterable(loader, what)
        if trainer.use_distributed_sampler:
            kwargs = trainer.strategy.distributed_sampler_kwargs
            loader = with_distributed_sampler(loader, kwargs, shuffle_default, unrepeated)
        if workers_seeded():
            loader = with_seeded_workers(loader, trainer.global_rank)
        return trainer.strategy.process_dataloader(loader)

    def _train_loader(self, train: Any) -> Any:
        """One training loader; several (a dict, a list or a CombinedLoader) are combined, each processed."""
        overfit = self._trainer.overfit_batches
        if isinstance(train, (Mapping, list, tuple)):
            train = CombinedLoader(train, "max_size_cycle")
        if isinstance(train, CombinedLoader):
            if train.mode == "sequential":
                rank_zero_warn(
                    "fit() with CombinedLoader(mode='sequential'): training_step receives every batch of the first "
                    "loader, then of the next, with batch_idx counting over the whole epoch."
                )
            loaders = (
                [sequential(loader, "train_dataloaders") for loader in train.flattened] if overfit else train.flattened
            )
            train.flattened = [self.process(loader, "train_dataloaders", True) for loader in loaders]
            return train
        loader = sequential(train, "train_dataloaders") if overfit else train
        return self.process(loader, "train_dataloaders", True)

    def reload_fit(self) -> None:
        """Ask the DataModule (or module) for new fit dataloaders now (``reload_dataloaders_every_n_epochs``)."""
        self.setup_fit(*self._fit_given)
        self.setup_train()
        self.setup_val()

    def setup_fit(self, train: Any, val: Any) -> None:
        """Note where ``fit``'s data comes from; the loaders are requested later, when the loop needs them.

        As in Lightning, ``val_dataloader()`` is called by the sanity check, ``train_dataloader()``
        when training starts (then ``val_dataloader()`` if there was no sanity check), or earlier
        when ``trainer.estimated_stepping_batches`` is read (in ``configure_optimizers``, say).

        Raises:
            MisconfigurationError: There is no training data anywhere.
        """
        if train is None and not self.defines("train_dataloader"):
            raise MisconfigurationError(
                "fit() needs training data: pass train_dataloaders=..., a DataModule with "
                "train_dataloader(), or define train_dataloader() on the model."
            )
        self._fit_given = (train, val)
        self._train_ready = self._val_ready = False
        self.train_loader, self.num_training_batches = None, math.inf
        self.val_loaders, self.num_val_batches = [], []

    @property
    def fit_loaders_from_hooks(self) -> bool:
        """Whether fit's dataloaders come from the hooks (DataModule or module), not from fit's arguments."""
        return self._fit_given[0] is None and self._fit_given[1] is None

    def defines(self, hook: str) -> bool:
        """Whether the DataModule or the module defines ``hook`` (``"train_dataloader"``...), without calling it."""
        trainer = self._trainer
        return any(
            owner is not None and is_overridden(owner, hook, base)
            for owner, base in ((trainer.datamodule, DataModule), (trainer.module, Module))
        )

    @property
    def validation_possible(self) -> bool:
        """Whether ``fit`` may validate: ``validation_step``, validation data, and ``limit_val_batches`` above 0.

        Decided without requesting the validation loaders.
        """
        trainer = self._trainer
        if not is_overridden(trainer.module, "validation_step", Module) or trainer.limit_val_batches == 0:
            return False
        return self._fit_given[1] is not None or self.defines("val_dataloader")

    def warn_if_validation_is_skipped(self) -> None:
        """Say so, once per ``fit``, when validation data and ``validation_step`` do not come together.

        Validation data without ``validation_step``, or ``validation_step`` without validation data,
        would otherwise skip validation without a word (Lightning warns about both).
        ``limit_val_batches=0`` says that no validation is intended: nothing is said then.
        """
        trainer = self._trainer
        if trainer.limit_val_batches == 0:
            return
        module = trainer.module
        has_step = is_overridden(module, "validation_step", Module)
        given = self._fit_given[1] is not None
        has_data = given or self.defines("val_dataloader")
        if has_data and not has_step:
            where = "val_dataloaders were given to fit()" if given else "val_dataloader() is defined"
            rank_zero_warn(
                f"Validation is skipped: {where}, but {type(module).__name__} defines no validation_step. "
                "Hint: define validation_step(self, batch, batch_idx), or leave the validation data out."
            )
        elif has_step and not has_data:
            rank_zero_warn(
                f"Validation never runs: {type(module).__name__} defines validation_step, but fit() has no "
                "validation data (no val_dataloaders=, and neither the DataModule nor the model defines "
                "val_dataloader()). Hint: pass val_dataloaders=..., define val_dataloader(), or set "
                "limit_val_batches=0 to say that no validation is intended."
            )

    def warn_if_reload_cannot_reload(self) -> None:
        """Say so, once per ``fit``, when ``reload_dataloaders_every_n_epochs`` cannot give new loaders.

        Loaders passed to ``fit()`` itself are the same objects every epoch: only the hooks
        (``train_dataloader()``, ``val_dataloader()``) can build new ones.
        """
        every = self._trainer.reload_dataloaders_every_n_epochs
        given = [
            name
            for name, loaders in zip(("train_dataloaders", "val_dataloaders"), self._fit_given)
            if loaders is not None
        ]
        if every and given:
            rank_zero_warn(
                f"reload_dataloaders_every_n_epochs={every} cannot reload {' and '.join(given)}: they were passed "
                "to fit() directly, so the same loaders are read every epoch. Hint: return them from "
                "train_dataloader()/val_dataloader() of the module or a DataModule to have them built again."
            )

    def setup_train(self) -> None:
        """Request and prepare the training loader, once per ``fit``."""
        if self._train_ready:
            return
        self._train_ready = True
        train = self._fit_given[0]
        train = train if train is not None else self.source("train_dataloader")
        if train is None:
            raise MisconfigurationError("train_dataloader() returned None: fit() needs training data.")
        self.train_loader = self._train_loader(train)
        self.num_training_batches = limit_batches(
            num_batches(self.train_loader), self._trainer.limit_train_batches, "limit_train_batches"
        )

    def setup_val(self) -> None:
        """Request and prepare ``fit``'s validation loaders, once per ``fit`` (none when it cannot validate)."""
        if self._val_ready:
            return
        self._val_ready = True
        if not self.validation_possible:
            return  # no validation: its dataloader is not even requested
        val = self._fit_given[1]
        loaders = as_list(val if val is not None else self.source("val_dataloader"), "val_dataloaders")
        if self._trainer.overfit_batches:
            loaders = [sequential(v, "val_dataloaders") for v in loaders]
        self.val_loaders = [self.process(v, "val_dataloaders", False) for v in loaders]
        self.num_val_batches = [
            limit_batches(num_batches(v), self._trainer.limit_val_batches, "limit_val_batches")
            for v in self.val_loaders
        ]

    def setup_evaluation(self, fn: TrainerFn, dataloaders: Any) -> tuple[list[Any], list[float]]:
        """The loaders of ``validate``, ``test`` or ``predict`` and their batch counts."""
        trainer = self._trainer
        prefix = _PREFIX[fn]
        given = dataloaders if dataloaders is not None else self.source(f"{prefix}_dataloader")
        predicting = fn is TrainerFn.PREDICTING  # every sample predicted once: no repeats to even the shards
        loaders = [self.process(d, "dataloaders", False, unrepeated=predicting) for d in as_list(given, "dataloaders")]
        if not loaders:
            raise MisconfigurationError(
                f"trainer.{fn.value}() found no data: pass dataloaders=..., or define "
                f"{prefix}_dataloader() on the DataModule or the model."
            )
        limit = getattr(trainer, f"limit_{prefix}_batches")
        limits = [limit_batches(num_batches(d), limit, f"limit_{prefix}_batches") for d in loaders]
        if not predicting:
            _warn_if_padded(fn.value, loaders)
        self.eval_batches[fn] = limits
        return loaders, limits


def _padding(loader: Any) -> tuple[int, int]:
    """(samples a DistributedSampler repeats to even the shards, samples it shares out) of ``loader``; (0, 0): none."""
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if not isinstance(sampler, (DistributedSampler, DistributedSamplerWrapper)) and batch_sampler is not None:
        sampler = getattr(batch_sampler, "sampler", None)  # a batch sampler of the user's, rebuilt around one
    if isinstance(sampler, DistributedSamplerWrapper):
        sampler = sampler._positions
    if not isinstance(sampler, DistributedSampler) or isinstance(sampler, UnrepeatedDistributedSampler):
        return 0, 0
    if sampler.drop_last:
        return 0, 0
    shared = len(cast(Sized, sampler.dataset))  # a sized dataset: the sampler took its length
    return max(0, sampler.total_size - shared), shared


def _warn_if_padded(what: str, loaders: list[Any]) -> None:
    """``validate``/``test`` over several processes: say when the shards repeat samples (their metrics count twice)."""
    for index, loader in enumerate(loaders):
        repeated, shared = _padding(loader)
        if repeated:
            from torchplug.utilities.warnings import PossibleUserWarning  # a module of its own: loaded when it warns

            which = f" (dataloader {index})" if len(loaders) > 1 else ""
            rank_zero_warn(
                f"trainer.{what}(){which}: the DistributedSampler repeats {repeated} of the {shared} samples to give "
                f"every process an equal share, so metrics over the whole set count them twice. Hint: run "
                f"{what} on one device (Trainer(devices=1)), or use a dataset whose size divides evenly.",
                category=PossibleUserWarning,
            )
