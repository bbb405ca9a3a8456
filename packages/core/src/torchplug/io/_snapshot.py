"""The snapshot of the ``async`` checkpoint IO: every tensor copied into reused staging buffers.

A :class:`Slot` owns one set of staging buffers; :func:`take_snapshot` copies a checkpoint's storages
into them (each storage once, so tied weights and views stay shared) and rebuilds the checkpoint's
structure around the copies. Split from :mod:`torchplug.io.async_io`, which schedules the writes.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Final

import torch

__all__ = ["CopyPool", "Slot", "StorageKey", "default_copy_threads", "storages_of", "take_snapshot"]

log = logging.getLogger(__name__)

_MISSING: Final = object()
#: Leaves that are immutable: the snapshot shares them instead of copying them.
_ATOMIC: Final = frozenset({int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device})

StorageKey = tuple[torch.device, int]  # (device, data pointer) of one storage
BufferPool = dict[tuple[torch.device, int], list[torch.Tensor]]  # (source device, bytes) -> staging buffers
CopyPair = tuple[torch.Tensor, torch.Tensor]  # (staging buffer, source): byte views of the same size

#: Below this many bytes of host-to-host copies a snapshot copies on the caller's thread alone: handing
#: work to other threads costs tens of microseconds, which only pays off for copies of milliseconds.
PARALLEL_COPY_MIN_BYTES: Final = 8 << 20
#: Most threads a snapshot's copy uses by default (past a few, memory bandwidth is spent anyway).
MAX_DEFAULT_COPY_THREADS: Final = 8


def default_copy_threads() -> int:
    """Threads for a snapshot's host copies: the CPUs this process may use, over torch's intra-op threads.

    One copy thread per CPU that torch's own intra-op parallelism leaves unused: with
    ``torch.set_num_threads(1)`` (the usual setting of data-parallel processes and of the
    benchmarks) on 4 CPUs, 4 threads copy; when torch already uses every CPU, its own parallel
    ``copy_`` does the work alone (1). At most :data:`MAX_DEFAULT_COPY_THREADS`.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_COPY_THREADS, cpus // max(1, torch.get_num_threads())))


class CopyPool:
    """Copies a snapshot's host tensors into their staging buffers on several threads at once.

    The caller's thread copies one share itself and waits for the others, so a snapshot is
    complete when :meth:`copy` returns, exactly as with one thread; only the time the caller
    waits changes (one thread copies at about the memory bandwidth of one core). torch releases
    the GIL inside ``copy_``, so the threads run in parallel.

    Args:
        threads: How many threads copy, the caller's included (1: the caller copies alone).
    """

    __slots__ = ("_executor", "threads")

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor: ThreadPoolExecutor | None = None

    def copy(self, pairs: list[CopyPair]) -> None:
        """Copy each source into its buffer (byte views of equal size); returns when every copy is done."""
        total = sum(source.numel() for _, source in pairs)
        if self.threads <= 1 or total < PARALLEL_COPY_MIN_BYTES:
            _copy_each(pairs)
            return
        shares = _split(pairs, total, self.threads)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="torchplug-checkpoint-copy")
        futures = [self._executor.submit(_copy_each, share) for share in shares[1:]]
        try:
            _copy_each(shares[0])
        finally:  # never return (or raise) while another thread still writes into the buffers
            wait(futures)
        for future in futures:
            future.result()  # re-raises a copy's error

    def close(self) -> None:
        """Stop the copy threads (a later :meth:`copy` starts new ones)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def forget(self) -> None:
        """Drop the threads without joining them (in a forked child, where they do not exist)."""
        self._executor = None


def _copy_each(pairs: list[CopyPair]) -> None:
    for buffer, source in pairs:
        buffer.copy_(source)


def _split(pairs: list[CopyPair], total: int, parts: int) -> list[list[CopyPair]]:
    """``parts`` lists of pairs with about ``total / parts`` bytes each (large tensors cut into slices)."""
    share = -(-total // parts)
    shares: list[list[CopyPair]] = [[]]
    room = share
    for buffer, source in pairs:
        offset, size = 0, source.numel()
        while offset < size:
            if room == 0:
                shares.append([])
                room = share
            take = min(room, size - offset)
            shares[-1].append((buffer[offset : offset + take], source[offset : offset + take]))
            offset += take
            room -= take
    return shares


class Slot:
    """Staging buffers of one snapshot, kept after its write for the next save to reuse.

    Args:
        shared: Put host buffers in shared memory (another process writes the snapshot).
    """

    __slots__ = ("pool", "shared")

    def __init__(self, shared: bool = False) -> None:
        self.pool: BufferPool = {}
        self.shared = shared

    def stage(self, sources: dict[StorageKey, torch.Tensor], copier: CopyPool) -> dict[StorageKey, torch.Tensor]:
        """Copy each source (a byte view of one storage) into a host buffer of the same size.

        Host sources are copied by ``copier`` (on several threads); sources on an accelerator are
        queued on the caller's stream, so they stay on the caller's thread.
        """
        old, self.pool = self.pool, {}
        staged: dict[StorageKey, torch.Tensor] = {}
        for key, source in sources.items():
            bucket = old.get((source.device, source.numel()))
            if bucket:
                staged[key] = bucket.pop()
        old.clear()  # buffers the new checkpoint does not need go before new ones are allocated
        host: list[CopyPair] = []
        for key, source in sources.items():
            buffer = staged.get(key)
            if buffer is None:
                buffer = staged[key] = _staging_buffer(source, self.shared)
            if source.is_cpu:
                host.append((buffer, source))
            else:  # from an accelerator: queued on the caller's stream, waited for by the writer
                buffer.copy_(source, non_blocking=True)
            self.pool.setdefault((source.device, source.numel()), []).append(buffer)
        copier.copy(host)
        return staged

    def reserve(self, sources: dict[StorageKey, torch.Tensor]) -> None:
        """Allocate (and page in) a buffer for each source that has none yet, without copying anything.

        Run ahead of the first save, in the background: fresh memory costs its page faults once,
        here, instead of inside the copy that blocks the caller of a save.
        """
        wanted: dict[tuple[torch.device, int], int] = {}
        for source in sources.values():
            key = (source.device, source.numel())
            wanted[key] = wanted.get(key, 0) + 1
        for (device, numel), count in wanted.items():
            bucket = self.pool.setdefault((device, numel), [])
            source = next(s for s in sources.values() if (s.device, s.numel()) == (device, numel))
            while len(bucket) < count:
                buffer = _staging_buffer(source, self.shared)
                buffer.zero_()  # touch every page now
                bucket.append(buffer)


def _staging_buffer(source: torch.Tensor, shared: bool = False) -> torch.Tensor:
    """Host memory for a copy of ``source``: pinned when it comes from an accelerator (if pinning works).

    ``shared``: in shared memory, for a writer in another process (not pinned then).
    """
    if source.is_cpu or shared:  # host memory already: no pinning needed
        buffer = torch.empty(source.numel(), dtype=torch.uint8)
        return buffer.share_memory_() if shared else buffer
    try:
        return torch.empty(source.numel(), dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # no pinned memory here: a slower, synchronous copy into pageable memory
        return torch.empty(source.numel(), dtype=torch.uint8)


def take_snapshot(checkpoint: dict[str, Any], slot: Slot, copier: CopyPool) -> tuple[dict[str, Any], list[torch.Event]]:
    """Copy ``checkpoint``: containers rebuilt, tensors staged in ``slot``, other mutable leaves deep-copied."""
    with torch.no_grad():
        sources: dict[StorageKey, torch.Tensor] = {}
        _collect_storages(checkpoint, sources, set())
        rebuild = _Rebuild(slot.stage(sources, copier))
        snapshot = rebuild(checkpoint)
    # Copies from (and clones on) an accelerator are queued on the caller's stream: the writer waits for them.
    devices = {source.device for source in sources.values()} | rebuild.devices
    events = [_record_event(device) for device in devices if device.type not in ("cpu", "meta")]
    return snapshot, [event for event in events if event is not None]


def storages_of(checkpoint: dict[str, Any]) -> dict[StorageKey, torch.Tensor]:
    """A byte view of each distinct storage of the stageable tensors of ``checkpoint``."""
    sources: dict[StorageKey, torch.Tensor] = {}
    with torch.no_grad():
        _collect_storages(checkpoint, sources, set())
    return sources


def _stageable(tensor: torch.Tensor) -> bool:
    """Plain dense tensors are staged by storage; anything exotic is deep-copied instead."""
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not (tensor.is_quantized or tensor.is_nested or tensor.is_neg())
        and tensor.device.type in _staged_device_types()
        and tensor.untyped_storage().nbytes() > 0
    )


@functools.cache
def _staged_device_types() -> frozenset[str]:
    """The CPU and torch's current accelerator (CUDA, XPU, MPS...): raw storages there can be copied."""
    accelerator = torch.accelerator.current_accelerator()
    return frozenset({"cpu"} | ({accelerator.type} if accelerator is not None else set()))


def _record_event(device: torch.device) -> torch.Event | None:
    """An event the writer waits on for the copies queued on ``device``; else wait for them here."""
    try:
        event = torch.Event(device=device)
        event.record()
        return event
    except (RuntimeError, ValueError, TypeError, AttributeError):  # a backend without generic events
        _synchronize(device)
        return None


def _synchronize(device: torch.device) -> None:
    """Wait until the work queued on ``device`` is done, through ``torch.accelerator`` (any device type it serves).

    A device of another type than torch's current accelerator (say, an XLA tensor copied without
    staging) has nothing torch can wait on: its copy was not queued on a stream torch knows, and
    the writer reads it through the device's own library.
    """
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is not None and device.type == accelerator.type:
        torch.accelerator.synchronize(device)
    else:
        log.debug("No synchronisation for %s: torch's accelerator is %s", device, accelerator)


def _storage_key(storage: torch.UntypedStorage) -> StorageKey:
    return storage.device, storage.data_ptr()


def _collect_storages(obj: Any, sources: dict[StorageKey, torch.Tensor], seen: set[int]) -> None:
    """Find the distinct storages of the stageable tensors in dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        if _stageable(obj):
            storage = obj.untyped_storage()
            key = _storage_key(storage)
            if key not in sources:
                sources[key] = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    elif isinstance(obj, (dict, list, tuple)) and id(obj) not in seen:
        seen.add(id(obj))
        for value in obj.values() if isinstance(obj, dict) else obj:
            _collect_storages(value, sources, seen)


@dataclass
class _Rebuild:
    """Rebuild a checkpoint over the staged buffers; shared objects stay shared (one memo, as deepcopy)."""

    staged: dict[StorageKey, torch.Tensor]
    memo: dict[int, Any] = field(default_factory=dict)
    devices: set[torch.device] = field(default_factory=set)

    def __call__(self, obj: Any) -> Any:
        if type(obj) in _ATOMIC:
            return obj
        done = self.memo.get(id(obj), _MISSING)
        if done is not _MISSING:
            return done
        new: Any
        if isinstance(obj, torch.Tensor):
            new = self._tensor(obj)
            self.devices.add(new.device)
        elif isinstance(obj, dict):  # state dicts are OrderedDicts with a ``_metadata`` attribute
            new = self.memo[id(obj)] = {} if type(obj) is dict else copy.copy(obj)
            new.update((key, self(value)) for key, value in obj.items())
        elif type(obj) is list:
            new = self.memo[id(obj)] = []
            new.extend(self(value) for value in obj)
        elif type(obj) is tuple or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
            items = [self(value) for value in obj]
            new = tuple(items) if type(obj) is tuple else type(obj)(*items)
        else:  # dataclasses, Namespace, numpy arrays...: deepcopied, sharing the tensors copied above
            new = _deepcopy_or_share(obj, self.memo)
        self.memo[id(obj)] = new
        return new

    def _tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if not _stageable(tensor):
            try:
                return copy.deepcopy(tensor, self.memo)
            except RuntimeError:  # a non-leaf tensor
                return tensor.detach().clone()
        buffer = self.staged[_storage_key(tensor.untyped_storage())]
        new = torch.empty(0, dtype=tensor.dtype, device=buffer.device)
        new.set_(buffer.untyped_storage(), tensor.storage_offset(), tensor.size(), tensor.stride())
        if tensor.is_conj():  # a lazy conjugate view: the storage holds the data before conjugation
            new = new.conj()
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(new, requires_grad=tensor.requires_grad)
        return new.requires_grad_(tensor.requires_grad)


_WARNED_SHARED: set[type] = set()


def _deepcopy_or_share(obj: Any, memo: dict[int, Any]) -> Any:
    try:
        return copy.deepcopy(obj, memo)
    except Exception as exc:  # it may still pickle: let the writer try, with the live object
        kind = type(obj)
        if kind not in _WARNED_SHARED:  # once per type: a checkpoint is saved many times
            _WARNED_SHARED.add(kind)
            warnings.warn(
                f"An asynchronous checkpoint holds a {kind.__module__}.{kind.__qualname__} that cannot be copied "
                f"({type(exc).__name__}: {exc}): it is written as it is when the background write runs, so a "
                "change made to it before then ends up in the checkpoint. Hint: make it deep-copyable "
                "(define __deepcopy__), or save synchronously (the 'torch' checkpoint IO).",
                stacklevel=2,
            )
        return obj


# -- the background writer -------------------------------------------------------------------
