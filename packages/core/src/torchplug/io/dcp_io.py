"""The ``dcp`` and ``dcp_async`` checkpoint IO: sharded checkpoint directories through ``torch.distributed.checkpoint``.

Every process writes its own shards, in parallel; nothing is gathered on rank 0. What a checkpoint
directory holds (DCP's own keys, flattened with dots):

* ``state_dict.<name>``: the model's tensors. Under FSDP each process holds and writes its shard;
  under DDP (or one process) the tensors are whole, and DCP spreads their writing over the processes;
* ``optimizer_states.<i>...``: each optimizer's state, keyed by parameter name (DCP's form), sharded
  like the parameters;
* ``torchplug.common``: global rank 0's copy of every other entry (steps, loops, callbacks,
  schedulers, hyperparameters, versions), one pickled blob read with ``weights_only``;
* ``torchplug.rank<N>``: process N's own entries (``rng``, and ``accumulated_gradients`` when a
  checkpoint is written in the middle of an accumulation window), one blob per process.

Reading resharded: :meth:`DistributedCheckpointIO.load_distributed` fills the tensors each process
holds now, in its current layout, from whatever number of processes wrote the checkpoint; each
process gets its own random state back when the world size is unchanged. The life cycle of a
directory (written hidden, renamed into place when complete, removed atomically) is in
:mod:`torchplug.io._dcp_layout`.
"""

from __future__ import annotations

import atexit
import errno
import io
import logging
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata
from typing_extensions import override

from torchplug._errors import CheckpointLoadError, MisconfigurationError
from torchplug.io._dcp_layout import (
    COMMON_KEY,
    METADATA_FILE,
    RANK_KEY_PREFIX,
    commit_directory,
    is_complete,
    remove_directory,
    temporary_directory,
    url_to_fs,
    wait_for_removals,
)
from torchplug.io._digest import IntegrityError, Verification, seal_directory, verify_directory
from torchplug.io.async_io import CheckpointSaveError
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.utilities.rank_zero import rank_zero_warn

__all__ = [
    "RANK_LOCAL_KEYS",
    "SHARDED_KEYS",
    "DistributedCheckpointIO",
    "read_full",
    "read_metadata",
    "verify_sharded",
]

log = logging.getLogger(__name__)

#: The entries handed to DCP as trees of (possibly sharded) tensors; everything else is a blob.
SHARDED_KEYS: Final = ("state_dict", "optimizer_states")
#: Entries that differ between processes: each process writes and reads back its own.
RANK_LOCAL_KEYS: Final = ("rng", "accumulated_gradients")
_EXECUTORS: Final = ("auto", "thread", "process")


class DistributedCheckpointIO(CheckpointIO):
    """Write and read sharded checkpoint directories with ``torch.distributed.checkpoint``, on any fsspec filesystem.

    A collective IO (:attr:`~torchplug.CheckpointIO.collective`): every process calls
    :meth:`save_checkpoint` with its own shards and writes them in parallel, with no gather on rank
    0. A directory appears under its final name only once every process has written and the
    metadata is on storage; until then it is a hidden sibling, and :meth:`exists` (so
    ``ckpt_path="last"`` and ``ModelCheckpoint``) never sees it. Removing one (``save_top_k``
    rotation) removes the whole directory, atomically on the local disk.

    With ``async_save=True`` a save only copies the tensors into staging memory (kept and reused from
    one save to the next, allocated ahead by :meth:`prepare`) and returns; DCP's own
    ``async_save`` writes in the background, in a separate process per rank by default. Before the
    next save, a removal, a load, a requeue and the end of the run, every pending save is
    finished (a durability barrier); a background failure is raised on the training thread then,
    as :class:`~torchplug.io.async_io.CheckpointSaveError`.

    Local paths, ``memory://`` and any fsspec URL work. A sharded checkpoint written by several
    processes needs storage that every process sees (a shared filesystem, an object store):
    ``memory://`` and node-local disks serve one process, or one node.

    A plain ``.ckpt`` file given to :meth:`load_checkpoint` or :meth:`load_distributed` is read with
    ``torch.load``, so runs move between both formats.

    Args:
        async_save: Write in the background (see above).
        executor: Where the background write runs: ``"process"`` (a process per rank started on the
            first save, which keeps serialisation off the training process; needs a process group),
            ``"thread"``, or ``"auto"`` (the default: a process when a process group exists, else a
            thread).
        fsync: Flush every file to the disk before the directory is committed (DCP's ``sync_files``;
            on the local disk only). Survives power loss, not only a crash or a kill.
        thread_count: Threads each process writes its files with (DCP's ``thread_count``).
        rank_local_keys: Checkpoint entries that differ between processes (each process keeps its own).
    """

    collective = True

    def __init__(
        self,
        async_save: bool = False,
        executor: str = "auto",
        fsync: bool = True,
        thread_count: int = 1,
        rank_local_keys: tuple[str, ...] = RANK_LOCAL_KEYS,
    ) -> None:
        if executor not in _EXECUTORS:
            raise ValueError(f"executor={executor!r} is not one of {', '.join(map(repr, _EXECUTORS))}.")
        if isinstance(thread_count, bool) or not isinstance(thread_count, int) or thread_count < 1:
            raise ValueError(f"thread_count={thread_count!r} is not a positive integer.")
        self.async_save = bool(async_save)
        self.executor = executor
        self.fsync = fsync
        self.thread_count = thread_count
        self.rank_local_keys = tuple(rank_local_keys)
        self._background = _Background() if self.async_save else None
        if self._background is not None:
            _BACKGROUNDS.add(self._background)

    # -- saving -----------------------------------------------------------------------------------

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Write this process's part of ``checkpoint`` into the directory ``path`` (every process calls this).

        Args:
            checkpoint: This process's checkpoint: its shards under ``state_dict`` and
                ``optimizer_states``, the rest as plain data.
            path: The directory (a local path or fsspec URL); replaced atomically when it exists.
            storage_options: Options for the fsspec filesystem (for example credentials).

        Raises:
            CheckpointSaveError: An earlier background save failed; this one was not started.
        """
        options = _check_storage_options(storage_options, path)
        self._finish_pending()
        rank = _rank()
        state = _split(checkpoint, rank, self.rank_local_keys)
        target = _Target.of(path, options, _agreed_token())
        if self._background is None:
            try:
                with _quiet_no_dist(), _dcp_errors():
                    writer = target.writer(self.fsync, self.thread_count)
                    state_dict_saver.save(state, storage_writer=writer, planner=_SavePlanner(), no_dist=_no_dist())
            except Exception as exc:  # every process gets the error (DCP gathers the writes' results)
                full = target.full_disk_error(exc)
                if rank == 0:
                    target.discard()
                if full is not None:
                    raise full from exc
                raise
            if rank == 0:
                target.commit()
            return
        self._background.submit(
            state, target, target.writer(self.fsync, self.thread_count), rank, self._resolved_executor()
        )

    @override
    def prepare(self, checkpoint: dict[str, Any]) -> None:
        """Asynchronous saves: allocate the staging memory of checkpoints like this one, in the background."""
        if self._background is not None:
            self._background.prepare(_split(checkpoint, _rank(), self.rank_local_keys), self._resolved_executor())

    def _resolved_executor(self) -> str:
        if self.executor != "auto":
            return self.executor
        return "process" if _distributed() else "thread"

    # -- reading ----------------------------------------------------------------------------------

    @override
    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the whole checkpoint at ``path`` in this process alone: every shard joined into whole tensors.

        For one process that needs everything (``Module.load_from_checkpoint``, consolidation,
        inspection). Training processes read their own shards with :meth:`load_distributed`.

        Args:
            path: A sharded checkpoint directory, or a plain checkpoint file (read with ``torch.load``).
            map_location: The device for the tensors: None or ``"cpu"`` (the default), or a device.
            weights_only: Unpickle only tensors and plain data (the safe default).

        Raises:
            FileNotFoundError: Nothing complete at ``path``; the message says what is there.
        """
        self.flush()
        fs, fs_path, _ = url_to_fs(path)
        if fs.isfile(fs_path):
            return TorchCheckpointIO().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        _require_complete(fs, fs_path, path)
        return read_full(path, weights_only=weights_only, device=_device_of(map_location))

    @override
    def load_distributed(self, path: str, target: dict[str, Any], weights_only: bool = True) -> dict[str, Any]:
        """Read this process's shards of ``path`` into ``target``, resharded (every process calls this).

        A plain checkpoint file is read whole instead (``target`` untouched): the strategy loads
        its full tensors.

        Raises:
            FileNotFoundError: Nothing complete at ``path``.
            MisconfigurationError: The checkpoint does not fit this run (other parameter names or
                optimizer states), or it was written in the middle of a gradient accumulation
                window by another number of processes.
        """
        self.flush()
        if _distributed():  # rank 0 may have committed the last asynchronous save just now
            dist.barrier()
        fs, fs_path, _ = url_to_fs(path)
        if fs.isfile(fs_path):
            return TorchCheckpointIO().load_checkpoint(path, map_location="cpu", weights_only=weights_only)
        _require_complete(fs, fs_path, path)
        _verified(path)
        reader = _reader(path)
        metadata = reader.read_metadata()
        rank, world = _rank(), _world_size()
        written_by = _ranks_in(metadata)
        rank_key = f"{RANK_KEY_PREFIX}{rank}"
        template: dict[str, Any] = {key: target[key] for key in SHARDED_KEYS if key in target}
        template[COMMON_KEY] = None
        if rank_key in metadata.state_dict_metadata:
            template[rank_key] = None
        planner = _LoadPlanner(weights_only=weights_only)
        try:
            with _quiet_no_dist(), _dcp_errors():
                state_dict_loader.load(template, storage_reader=reader, planner=planner, no_dist=_no_dist())
        except (RuntimeError, KeyError, ValueError) as exc:  # DCP's message lists the keys; say what it means here
            raise MisconfigurationError(
                f"The sharded checkpoint {path!r} does not fit this run: {exc}. Hint: resume with the model, "
                "optimizers and parameter names that wrote it (any number of processes works)."
            ) from exc
        checkpoint = dict(template.pop(COMMON_KEY))
        local = template.pop(rank_key, None) or {}
        if written_by != world:
            self._check_resharded(local, written_by, world, path)
            if "accumulated_gradients" in local:
                local = {k: v for k, v in local.items() if k != "accumulated_gradients"}
        checkpoint.update(local)
        checkpoint.update(template)
        return checkpoint

    @staticmethod
    def _check_resharded(local: dict[str, Any], written_by: int, world: int, path: str) -> None:
        if "accumulated_gradients" in local:
            raise MisconfigurationError(
                f"{path!r} was written by {written_by} processes in the middle of a gradient accumulation "
                f"window; the gradients accumulated so far belong to those {written_by} processes and cannot "
                f"be split over {world}. Hint: resume on {written_by} processes, or from a checkpoint written "
                "at an optimizer step (ModelCheckpoint's are)."
            )
        if world > written_by:
            extra = f"process {written_by}" if world == written_by + 1 else f"processes {written_by} to {world - 1}"
            rank_zero_warn(
                f"{path!r} was written by {written_by} process(es) and is resumed on {world}: {extra} "
                "have no random state in it and keep their own (the model, optimizer and loop state are "
                "restored exactly)."
            )

    # -- the rest ---------------------------------------------------------------------------------

    @override
    def remove_checkpoint(self, path: str) -> None:
        """Finish pending saves, then delete the checkpoint directory (or file) at ``path``, atomically."""
        self.flush()
        fs, fs_path, local = url_to_fs(path)
        remove_directory(fs, fs_path, local)

    @override
    def exists(self, path: str) -> bool:
        """Whether a complete checkpoint (a directory with its metadata, or a file) is at ``path``, or being saved."""
        if self._background is not None and self._background.is_pending(path):
            return True
        fs, fs_path, _ = url_to_fs(path)
        return bool(fs.isfile(fs_path)) or is_complete(fs, fs_path)

    @override
    def flush(self) -> None:
        """Block until every pending save is written and committed (and replaced ones deleted); raise what failed.

        Raises:
            CheckpointSaveError: A background save failed.
        """
        self._finish_pending()

    @override
    def teardown(self) -> None:
        """Flush, then free the staging memory (the next run allocates it again)."""
        try:
            self.flush()
        finally:
            if self._background is not None:
                self._background.close()

    def _finish_pending(self) -> None:
        if self._background is not None:
            self._background.wait()
        wait_for_removals()

    @override
    def __repr__(self) -> str:
        if not self.async_save:
            return f"DistributedCheckpointIO(fsync={self.fsync})"
        return f"DistributedCheckpointIO(async_save=True, executor={self.executor!r}, fsync={self.fsync})"


# -- where a save goes ---------------------------------------------------------------------------


@dataclass
class _Target:
    """One save's destination: the final directory, the hidden one written first, and their filesystem."""

    path: str
    fs: Any
    final: str
    tmp: str
    local: bool
    options: dict[str, Any]

    @classmethod
    def of(cls, path: str, options: dict[str, Any], token: str) -> _Target:
        fs, final, local = url_to_fs(path, options)
        return cls(path=path, fs=fs, final=final, tmp=temporary_directory(final, token), local=local, options=options)

    def writer(self, fsync: bool, thread_count: int) -> FileSystemWriter:
        """DCP's writer into the hidden directory."""
        if self.local:
            return FileSystemWriter(self.tmp, sync_files=fsync, thread_count=thread_count)
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        # No fsync off the local disk: DCP would fall back to a machine-wide os.sync().
        url = self.fs.unstrip_protocol(self.tmp)
        return FsspecWriter(url, sync_files=False, thread_count=thread_count, **self.options)

    def commit(self) -> None:
        if self.fs.exists(f"{self.tmp}/{METADATA_FILE}"):  # else commit_directory says the save did not finish
            seal_directory(self.fs, self.tmp)
        commit_directory(self.fs, self.tmp, self.final, self.local)

    def full_disk_error(self, exc: BaseException) -> OSError | None:
        """The error to raise instead of ``exc`` when it means the disk is full (torch's writer loses the errno)."""
        from torchplug.io.torch_io import _disk_full

        parent = self.final.rpartition("/")[0] or "/"
        if not (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) and not (
            self.local and _disk_full(exc, parent)
        ):
            return None
        return OSError(
            errno.ENOSPC,
            f"No space left on device: saving the sharded checkpoint to {self.path} stopped ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}). The directory at {self.path} was not "
            "changed (any earlier checkpoint there is intact) and the partial one was removed. Hint: free space on "
            "that filesystem, or save elsewhere (ModelCheckpoint(dirpath=...), default_root_dir=...)",
            self.path,
        )

    def discard(self) -> None:
        try:
            remove_directory(self.fs, self.tmp, self.local)
        except Exception as exc:  # the failure being reported matters more
            log.debug("Could not remove %s: %r", self.tmp, exc)


def _reader(path: str) -> FileSystemReader:
    fs, fs_path, local = url_to_fs(path)
    if local:
        return FileSystemReader(fs_path)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    return FsspecReader(fs.unstrip_protocol(fs_path))


def read_metadata(path: str) -> Metadata:
    """DCP's metadata of the sharded checkpoint at ``path``: every entry's key, size and type, without the data.

    Raises:
        CheckpointLoadError: The ``.metadata`` file is missing, cut short or not DCP's.
    """
    try:
        return _reader(path).read_metadata()
    except Exception as exc:  # pickle raises anything on bytes it does not understand
        raise CheckpointLoadError(
            f"Cannot load the sharded checkpoint {path}: its {METADATA_FILE} cannot be read ({type(exc).__name__}: "
            f"{exc}). It was damaged after the save (a complete save writes it whole, last). Hint: resume from an "
            "earlier checkpoint."
        ) from exc


def verify_sharded(path: str) -> Verification:
    """Check every shard file of the sharded checkpoint at ``path`` (:func:`torchplug.io._digest.verify_directory`).

    Raises:
        IntegrityError: A shard file is missing, cut short, or differs (named, with the item).
        CheckpointLoadError: The ``.metadata`` cannot be read.
    """
    fs, fs_path, _ = url_to_fs(path)
    return verify_directory(path, fs, fs_path, read_metadata(path))


def _verified(path: str) -> None:
    """Verify ``path`` before a load, as a CheckpointLoadError naming the shard file."""
    try:
        verify_sharded(path)
    except IntegrityError as exc:
        raise CheckpointLoadError(
            f"Cannot load the sharded checkpoint {path}: {exc}. It is not as it was written (damaged on storage or "
            "in a copy, or a shard file was removed). Hint: resume from an earlier checkpoint; `core checkpoint "
            "verify PATH` checks one without loading it."
        ) from exc


def _require_complete(fs: Any, fs_path: str, path: str) -> None:
    if is_complete(fs, fs_path):
        return
    if fs.isdir(fs_path):
        raise CheckpointLoadError(
            f"Cannot load the checkpoint {path}: it is a directory without {METADATA_FILE}, so not a complete "
            "sharded checkpoint (its save did not finish, its .metadata was removed, or it is not a checkpoint). "
            "Hint: give a complete checkpoint (core checkpoint inspect PATH tells)."
        )
    raise FileNotFoundError(f"Checkpoint file not found: {path}")


# -- what each process writes --------------------------------------------------------------------


def _split(checkpoint: dict[str, Any], rank: int, rank_local_keys: tuple[str, ...]) -> dict[str, Any]:
    """The dict DCP writes for this process: the sharded trees, rank 0's common blob, this rank's blob."""
    state: dict[str, Any] = {key: checkpoint[key] for key in SHARDED_KEYS if key in checkpoint}
    common = {k: v for k, v in checkpoint.items() if k not in SHARDED_KEYS and k not in rank_local_keys}
    if rank == 0:
        state[COMMON_KEY] = _blob(common)
    state[f"{RANK_KEY_PREFIX}{rank}"] = _blob({k: checkpoint[k] for k in rank_local_keys if k in checkpoint})
    return state


def _blob(obj: Any) -> io.BytesIO:
    # DCP writes a BytesIO as it is: one entry, read back with our planner's torch.load.
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def _ranks_in(metadata: Metadata) -> int:
    """How many processes wrote the checkpoint (one rank blob each)."""
    return sum(1 for key in metadata.state_dict_metadata if key.startswith(RANK_KEY_PREFIX)) or 1


class _SavePlanner(DefaultSavePlanner):
    """DCP's planner, writing our pre-pickled blobs as they are (DCP's own would pickle the BytesIO object)."""

    @override
    def transform_object(self, write_item: Any, object: Any) -> Any:
        if isinstance(object, io.BytesIO):
            return io.BytesIO(object.getbuffer())  # a fresh reader each time: the blob may be written twice
        return super().transform_object(write_item, object)


class _LoadPlanner(DefaultLoadPlanner):
    """DCP's planner, reading pickled entries with ``weights_only`` as asked (DCP's own unpickles anything)."""

    def __init__(self, weights_only: bool = True, allow_partial_load: bool = False) -> None:
        super().__init__(allow_partial_load=allow_partial_load)
        self.weights_only = weights_only

    @override
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=self.weights_only)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element

            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


def read_full(
    path: str,
    weights_only: bool = True,
    device: torch.device | None = None,
    keep: Callable[[str], bool] | None = None,
    rank: int = 0,
    verify: bool = True,
) -> dict[str, Any]:
    """Every entry of the sharded checkpoint at ``path`` (or those ``keep`` accepts), whole, in this process alone.

    Sharded tensors come back joined into whole tensors, with process ``rank``'s own entries (its
    random state). Runs without a process group.

    Args:
        path: A complete sharded checkpoint directory.
        weights_only: Unpickle only tensors and plain data.
        device: Where the tensors go (the CPU by default).
        keep: Which of DCP's flattened keys to read (``"state_dict.net.0.weight"``...); None: all.
        rank: Whose own entries to include.
        verify: Check every shard file first (:func:`verify_sharded`).

    Raises:
        CheckpointLoadError: A shard file is missing, cut short or damaged, or the metadata cannot be read.
    """
    reader = _reader(path)
    metadata = read_metadata(path)
    if verify:
        _verified(path)
    reader.read_metadata()  # DCP's reader learns the shard files here
    ours = (COMMON_KEY, f"{RANK_KEY_PREFIX}{rank}")
    template: dict[str, Any] = {}
    for key, entry in metadata.state_dict_metadata.items():
        if key.startswith(RANK_KEY_PREFIX) and key not in ours:
            continue  # the other processes' own entries
        if keep is not None and key not in ours and not keep(key):
            continue
        if isinstance(entry, TensorStorageMetadata):
            template[key] = torch.empty(entry.size, dtype=entry.properties.dtype, device=device or "cpu")
        elif isinstance(entry, BytesStorageMetadata):
            template[key] = None
    with _quiet_no_dist(), _dcp_errors():
        state_dict_loader.load(
            template, storage_reader=reader, planner=_LoadPlanner(weights_only=weights_only), no_dist=True
        )
    mappings: dict[str, tuple[Any, ...]] = metadata.planner_data or {}
    checkpoint: dict[str, Any] = {}
    common = template.pop(COMMON_KEY, None) or {}
    local = template.pop(f"{RANK_KEY_PREFIX}{rank}", None) or {}
    from torch.distributed.checkpoint._traverse import set_element

    for key, value in template.items():
        set_element(checkpoint, mappings.get(key, (key,)), value)
    return {**common, **local, **checkpoint}


# -- processes ------------------------------------------------------------------------------------


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _no_dist() -> bool:
    return not _distributed()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _world_size() -> int:
    return dist.get_world_size() if _distributed() else 1


def _agreed_token() -> str:
    """A token every process gets from rank 0 (so that all write into the same hidden directory)."""
    import uuid

    token = [uuid.uuid4().hex[:12] if _rank() == 0 else None]
    if _distributed() and _world_size() > 1:
        dist.broadcast_object_list(token, src=0)
    return str(token[0])


@contextmanager
def _quiet_no_dist() -> Iterator[None]:
    """Without a process group DCP warns on every call that it assumes one process: we know, and chose it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)
        yield


_NO_DIST_WARNING: Final = "torch.distributed is disabled, unavailable or uninitialized"


def _quiet_background_no_dist() -> None:
    """Ignore the same warning from DCP's own modules, for its background thread (asynchronous saves in one process).

    A ``catch_warnings()`` on this thread does not reach that thread.
    """
    warnings.filterwarnings("ignore", message=_NO_DIST_WARNING, module=r"torch\.distributed\.checkpoint")


def _own_error(exc: BaseException, rank: int) -> BaseException:
    """This process's own error inside DCP's ``CheckpointException`` (which holds every process's), else ``exc``."""
    if isinstance(exc, CheckpointException):
        failure = exc.failures.get(rank) or next(iter(exc.failures.values()), None)
        if failure is not None and isinstance(failure[0], BaseException):
            original: BaseException = failure[0]
            original.__context__ = exc
            return original
    return exc


@contextmanager
def _dcp_errors() -> Iterator[None]:
    """DCP wraps every process's error in a ``CheckpointException`` (a BaseException): raise this process's own."""
    try:
        yield
    except CheckpointException as exc:
        failures = exc.failures
        failure = failures.get(_rank()) or next(iter(failures.values()), None)
        if failure is None:
            raise
        original = failure[0]
        if not isinstance(original, Exception):
            raise
        raise original from exc


def _check_storage_options(storage_options: Any, path: str) -> dict[str, Any]:
    """The fsspec options for the filesystem of ``path``: a dict of names its class takes (others are refused)."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, dict):
        raise TypeError(
            f"storage_options={storage_options!r} is not a dict. Hint: DistributedCheckpointIO passes a dict of "
            "fsspec filesystem options (credentials, endpoint...) to the filesystem of the path."
        )
    import inspect

    from fsspec import AbstractFileSystem
    from fsspec.core import split_protocol
    from fsspec.registry import get_filesystem_class

    cls = get_filesystem_class(split_protocol(path)[0] or "file")
    accepted = {
        name
        for klass in cls.__mro__
        if issubclass(klass, AbstractFileSystem) and klass is not AbstractFileSystem
        for name, param in inspect.signature(klass.__init__).parameters.items()
        if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) and name != "self"
    }
    unknown = sorted(set(storage_options) - accepted)
    if unknown:
        raise TypeError(
            f"storage_options: {', '.join(map(repr, unknown))} is not an option of {cls.__name__} (the filesystem of "
            f"{path!r}); it takes {', '.join(sorted(accepted)) or 'none'}."
        )
    return dict(storage_options)


def _device_of(map_location: Any) -> torch.device | None:
    if map_location is None:
        return None
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    raise TypeError(
        f"map_location={map_location!r}: a sharded checkpoint is read straight into tensors on one device; give "
        "None, 'cpu' or a torch.device."
    )


# -- asynchronous saves ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Pending:
    target: _Target
    rank: int
    written: Future[Any]
    committed: Future[None] = field(default_factory=Future)


class _Background:
    """One asynchronous save in flight at most: DCP's ``async_save``, its staging memory, the commit and errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: _Pending | None = None
        self.failures: list[tuple[str, BaseException]] = []
        self.stager: Any = None
        self.shared_memory = False
        self.group: Any = None
        self.preparing: threading.Thread | None = None

    def _stager(self, executor: str) -> Any:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        shared = executor == "process"  # the writing process reads the staged tensors where they are
        if self.stager is None or self.shared_memory != shared:
            if self.stager is not None:
                self.stager.close()
            pinned = bool(torch.accelerator.is_available())
            if pinned and shared:  # pinned host memory in shared memory: DCP's stager registers it with the device
                self.stager = DefaultStager(StagingOptions(pinned, shared, False, pinned))
            else:
                self.stager = _CopyStager(shared)
            self.shared_memory = shared
        return self.stager

    def prepare(self, state: dict[str, Any], executor: str) -> None:
        """Stage ``state`` once in a background thread: the buffers then exist (and are paged in) for the first save."""
        self._join_preparation()
        stager = self._stager(executor)

        def stage() -> None:
            try:
                if isinstance(stager, _CopyStager):
                    stager.reserve(state)
                else:
                    stager.stage(state)
            except Exception as exc:  # only an optimisation: the first save allocates instead
                log.warning("Preparing the staging memory of asynchronous checkpoints failed: %r", exc)

        self.preparing = threading.Thread(target=stage, name="torchplug-dcp-prepare", daemon=True)
        self.preparing.start()

    def _join_preparation(self) -> None:
        thread, self.preparing = self.preparing, None
        if thread is not None:
            thread.join()

    def submit(self, state: dict[str, Any], target: _Target, writer: Any, rank: int, executor: str) -> None:
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

        self._join_preparation()
        if _distributed() and self.group is None:
            # Background collectives get their own group, so they never interleave with training's.
            self.group = dist.new_group(backend="gloo")
        kind = AsyncCheckpointerType.PROCESS if executor == "process" else AsyncCheckpointerType.THREAD
        if _no_dist():
            _quiet_background_no_dist()
        with _quiet_no_dist():
            response = state_dict_saver.async_save(
                state,
                storage_writer=writer,
                planner=_SavePlanner(),
                process_group=self.group,
                async_checkpointer_type=kind,
                async_stager=self._stager(executor),
                no_dist=_no_dist(),
            )
        written = response if isinstance(response, Future) else response.upload_completion
        pending = _Pending(target, rank, written)
        with self.lock:
            self.pending = pending
        written.add_done_callback(lambda _: self._finish(pending))

    def _finish(self, pending: _Pending) -> None:
        """In the background, once this process's write ended: commit the directory (rank 0), record failures."""
        try:
            pending.written.result()
            if pending.rank == 0:
                pending.target.commit()
        except BaseException as exc:
            error = _own_error(exc, pending.rank)
            full = pending.target.full_disk_error(error)
            if full is not None:
                full.__cause__ = error
                error = full
            with self.lock:
                self.failures.append((pending.target.path, error))
            log.error("Saving the sharded checkpoint %r in the background failed: %r", pending.target.path, exc)
            if pending.rank == 0:
                pending.target.discard()
        finally:
            pending.committed.set_result(None)

    def is_pending(self, path: str) -> bool:
        with self.lock:
            pending = self.pending
        return pending is not None and not pending.committed.done() and pending.target.path == path

    def wait(self) -> None:
        """The durability barrier: the save in flight is written and committed; raise what failed."""
        with self.lock:
            pending = self.pending
        if pending is not None:
            pending.committed.result()
        with self.lock:
            if self.pending is pending:
                self.pending = None
            failures, self.failures = self.failures, []
        if failures:
            path, error = failures[0]
            raise CheckpointSaveError(
                f"Saving the sharded checkpoint {path!r} in the background failed: {type(error).__name__}: {error}. "
                "Hint: the failure was logged with its traceback; the directory at that path was not updated.",
                [p for p, _ in failures],
            ) from error

    def close(self) -> None:
        self._join_preparation()
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        if self.group is not None:
            if _distributed():
                dist.destroy_process_group(self.group)
            self.group = None


class _CopyStager:
    """DCP's ``AsyncStager``: one reused set of host buffers, filled by several threads (as the ``async`` IO does).

    For plain tensors (one process, DDP); FSDP's ``DTensor`` shards are staged by DCP's ``DefaultStager``.

    DCP's ``DefaultStager`` copies every tensor on the caller's thread; the copy is the only time
    an asynchronous save blocks the training loop, and one thread copies at about one core's
    memory bandwidth. One slot suffices: a save waits for the previous one to be written first.

    Args:
        shared: The buffers live in shared memory (the ``process`` executor's writer reads them there).
    """

    _synchronize_after_execute = False

    def __init__(self, shared: bool) -> None:
        from torchplug.io._snapshot import CopyPool, Slot, default_copy_threads

        self.slot = Slot(shared)
        self.copier = CopyPool(default_copy_threads())
        self.default: Any = None

    @property
    def should_synchronize_after_execute(self) -> bool:
        """DCP's protocol: no wait after the write is started (:meth:`stage` returns a finished copy)."""
        return False

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``state_dict`` in the reused buffers, complete when it returns.

        A state with distributed tensors (FSDP's ``DTensor`` shards) goes to DCP's own stager,
        which knows how to stage them with their layout.
        """
        from torchplug.io._snapshot import take_snapshot

        if _has_distributed_tensors(state_dict):
            return self._fallback().stage(state_dict)  # type: ignore[no-any-return]
        snapshot, events = take_snapshot(state_dict, self.slot, self.copier)
        for event in events:
            event.synchronize()
        return snapshot

    def reserve(self, state_dict: dict[str, Any]) -> None:
        """Allocate (and page in) the buffers for checkpoints like ``state_dict``, without copying."""
        from torchplug.io._snapshot import storages_of

        if _has_distributed_tensors(state_dict):
            self._fallback().stage(state_dict)
        else:
            self.slot.reserve(storages_of(state_dict))

    def _fallback(self) -> Any:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        if self.default is None:
            self.default = DefaultStager(StagingOptions(False, self.slot.shared, False, False))
        return self.default

    def synchronize_staging(self) -> None:
        """DCP's protocol: nothing is left in flight after :meth:`stage`."""

    def close(self) -> None:
        """Free the buffers and stop the copy threads."""
        self.copier.close()
        if self.default is not None:
            self.default.close()
            self.default = None
        self.slot = type(self.slot)(self.slot.shared)


def _has_distributed_tensors(obj: Any) -> bool:
    """Whether ``obj`` (dicts, lists and tuples of tensors) holds a tensor subclass such as ``DTensor``."""
    if isinstance(obj, torch.Tensor):
        return type(obj) not in (torch.Tensor, torch.nn.Parameter)
    if isinstance(obj, dict):
        return any(_has_distributed_tensors(value) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_distributed_tensors(value) for value in obj)
    return False


_BACKGROUNDS: Final[weakref.WeakSet[_Background]] = weakref.WeakSet()


@atexit.register
def _finish_pending_saves() -> None:
    """At interpreter exit, let asynchronous saves in flight finish (failures were logged when they happened)."""
    for background in list(_BACKGROUNDS):
        try:
            background.wait()
        except CheckpointSaveError:
            pass
