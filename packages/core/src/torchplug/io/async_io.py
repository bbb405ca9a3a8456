"""The ``async`` checkpoint IO: snapshot on the caller's thread, write on one background thread.

How a save goes:

1. ``save_checkpoint`` raises the error of an earlier background save, if one failed.
2. It takes a *staging slot* (at most ``max_pending`` exist; with the default of 1 it waits for
   the write in flight to finish first).
3. It copies every tensor of the checkpoint into the slot's staging buffers. This copy is the
   only time the training loop is blocked. The buffers of the previous save are reused when the
   checkpoint has the same tensors (same storages' sizes and devices), so after the first save
   no fresh memory is touched: page faults of fresh allocations cost more than the copy itself.
   Each storage is copied once, whole, so tied weights and views stay shared and the file is byte
   for byte what a synchronous ``torch.save`` would write. Host memory is copied by several threads
   at once (``copy_threads``): one thread copies at about one core's memory bandwidth.
   Storages on an accelerator go to reused pinned host buffers, by copies queued on the caller's
   stream without waiting for them (the writer thread waits): the snapshot costs no accelerator
   memory, and those tensors are written as CPU tensors (``Strategy.load_checkpoint`` loads to
   the CPU anyway).
4. The wrapped IO writes the snapshot on the background thread, one save at a time, in order.

Pending saves are bounded by ``max_pending``; :meth:`AsyncCheckpointIO.remove_checkpoint` and
:meth:`~AsyncCheckpointIO.flush` wait for the writes in flight, so an old checkpoint is removed
only once the new one is on disk, and no write error is ever lost.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import torch
from fsspec.core import url_to_fs
from typing_extensions import override

from torchplug._errors import TorchplugError
from torchplug.io._snapshot import CopyPool, Slot, StorageKey, default_copy_threads, storages_of, take_snapshot
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.io.torch_io import TorchCheckpointIO

__all__ = ["AsyncCheckpointIO", "CheckpointSaveError"]

log = logging.getLogger(__name__)


class CheckpointSaveError(TorchplugError, RuntimeError):
    """A checkpoint save that ran in the background failed; the original exception is chained.

    Attributes:
        paths: The paths whose saves failed since the last report, oldest first.
    """

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


class AsyncCheckpointIO(CheckpointIO):
    """Save checkpoints on a background thread; the training loop only waits for a memory copy.

    Every tensor of the checkpoint is copied on the caller's thread before ``save_checkpoint``
    returns, so the caller may modify its tensors right away (tensors on an accelerator are
    copied to host memory by copies queued on the caller's stream, and written as CPU tensors).
    Other mutable leaves (not dicts, lists, tuples or tensors) are deep-copied. One background
    thread then writes the copy through the wrapped IO, which keeps its guarantees (atomic,
    durable with ``fsync=True``). A pending save counts in :meth:`exists`, and :meth:`load_checkpoint`
    of a pending path waits for it.

    Queue depth: at most one write runs at a time, and at most ``max_pending`` saves (the one
    being written included) hold a snapshot. A save beyond that waits for the oldest write to
    finish, so memory never grows past ``max_pending`` extra copies of the checkpoint, and saves
    are always written in the order they were made (``save(a); save(b); flush()`` writes both).

    Errors are never lost: a failed background write is logged at once (with its path) and
    raised on the caller's thread, as :class:`CheckpointSaveError` chained to the original
    error, by the next ``save_checkpoint``, ``flush``, ``remove_checkpoint`` or ``teardown``.
    Writes still pending when the interpreter exits are finished first.

    Args:
        checkpoint_io: The IO that writes, reads and removes files. ``None`` until set (the Trainer
            sets its accelerator's default); used alone, a :class:`TorchCheckpointIO` is used.
        max_pending: How many snapshots may exist at once (each is one copy of the checkpoint's
            tensors in host memory, kept between saves for reuse until :meth:`teardown`). With 1, a
            save made while the previous one is still being written waits for it; with 2, it is
            queued, and so on.
        copy_threads: How many threads copy host tensors into the staging buffers while the caller
            waits (the caller's thread included). ``None`` (the default): one per CPU this process
            may use, divided by torch's intra-op threads (``torch.set_num_threads``), at most 8: with
            one intra-op thread on 4 CPUs, 4 threads copy. 1 copies on the caller's thread alone.
            Snapshots under 8 MB are always copied by the caller alone.
    """

    def __init__(
        self, checkpoint_io: CheckpointIO | None = None, *, max_pending: int = 1, copy_threads: int | None = None
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending={max_pending!r} is not a positive integer. Hint: use 1 (the default) or 2.")
        if copy_threads is not None and (
            isinstance(copy_threads, bool) or not isinstance(copy_threads, int) or copy_threads < 1
        ):
            raise ValueError(
                f"copy_threads={copy_threads!r} is not a positive integer. Hint: use None (one per free CPU), or 1 "
                "to copy on the caller's thread alone."
            )
        self._checkpoint_io: CheckpointIO | None = None
        self._default_io: CheckpointIO | None = None
        self.checkpoint_io = checkpoint_io
        self.max_pending = max_pending
        self.copy_threads = copy_threads
        self._writer = _Writer(max_pending)
        _WRITERS.add(self._writer)
        weakref.finalize(self, self._writer.stop, False).atexit = False  # dropped without teardown

    @property
    def checkpoint_io(self) -> CheckpointIO | None:
        """The wrapped IO, or ``None`` when none was set (a :class:`TorchCheckpointIO` is then used).

        The Trainer sets it to its accelerator's default when it finds ``None`` here.
        """
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO | None) -> None:
        if isinstance(io, AsyncCheckpointIO):
            raise TypeError(f"AsyncCheckpointIO cannot wrap another AsyncCheckpointIO ({io!r}). Hint: wrap its IO.")
        if io is not None and not isinstance(io, CheckpointIO):
            raise TypeError(f"checkpoint_io={io!r} is not a CheckpointIO. Hint: pass e.g. TorchCheckpointIO().")
        if io is not None and io.collective:
            raise TypeError(
                f"AsyncCheckpointIO cannot wrap {io!r}: it is collective (every process writes its shards, with "
                "collectives that must not run on a background thread of ours). Hint: for sharded checkpoints "
                "saved in the background use plugins=['dcp_async'] (DCP's own asynchronous save)."
            )
        self._checkpoint_io = io

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Snapshot ``checkpoint`` and write it to ``path`` in the background.

        Returns once every tensor is copied (and, when ``max_pending`` saves already hold a
        snapshot, once the oldest one is written). ``storage_options`` go to the wrapped IO.

        Raises:
            CheckpointSaveError: An earlier background save failed; this save was not started.
        """
        self._raise_failures()
        io = self._io()
        slot = self._writer.acquire_slot()
        try:
            self._raise_failures()  # the write we waited for may have failed
            snapshot, events = take_snapshot(checkpoint, slot, self._writer.copier(self.copy_threads))
        except BaseException:
            self._writer.release_slot(slot)
            raise
        self._writer.submit(
            _Job(
                checkpoint=snapshot,
                path=path,
                key=_path_key(path),
                storage_options=storage_options,
                io=io,
                slot=slot,
                events=events,
            )
        )

    @override
    def prepare(self, checkpoint: dict[str, Any]) -> None:
        """Allocate a staging slot's buffers for checkpoints like ``checkpoint``, in the background.

        The Trainer calls it after the first optimizer step; the first save then copies into
        memory already paged in, as every later save does, instead of paying for fresh memory
        while the training loop waits. A save made before the preparation has finished waits
        for it (as it waits for a slot). :meth:`flush` waits for it too.
        """
        self._writer.prepare(storages_of(checkpoint))

    @override
    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the checkpoint at ``path`` with the wrapped IO, after flushing if it is still being saved."""
        if self._writer.is_pending(_path_key(path)):
            self.flush()
        return self._io().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    @override
    def remove_checkpoint(self, path: str) -> None:
        """Finish every pending write (see :meth:`flush`), then delete ``path`` with the wrapped IO.

        So rotating old checkpoints never removes one before the newer save is on disk, and
        removing a path that is being written removes the complete file.
        """
        self.flush()
        self._io().remove_checkpoint(path)

    @override
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists, counting a save still pending as existing (no flush needed)."""
        return self._writer.is_pending(_path_key(path)) or self._io().exists(path)

    @override
    def flush(self) -> None:
        """Block until every save started so far is written (and a :meth:`prepare` is done), then raise any failure.

        Raises:
            CheckpointSaveError: A background save failed since the last report.
        """
        self._writer.wait_idle()
        self._raise_failures()

    @override
    def teardown(self) -> None:
        """Flush, stop the background thread and free the staging buffers; then tear down the wrapped IO.

        The object stays usable: the next save starts a new thread.
        """
        try:
            self.flush()
        finally:
            self._writer.stop(wait=True)
            self._writer.free_staging()
            for io in {id(io): io for io in (self._checkpoint_io, self._default_io) if io is not None}.values():
                io.teardown()

    def _io(self) -> CheckpointIO:
        if self._checkpoint_io is not None:
            return self._checkpoint_io
        if self._default_io is None:
            self._default_io = TorchCheckpointIO()
        return self._default_io

    def _raise_failures(self) -> None:
        failures = self._writer.pop_failures()
        if not failures:
            return
        path, error = failures[0]
        message = f"Saving the checkpoint to {path!r} in the background failed: {type(error).__name__}: {error}"
        if len(failures) > 1:
            later = ", ".join(repr(p) for p, _ in failures[1:])
            message += f". {len(failures) - 1} later save(s) failed too: {later}"
        message += ". Hint: every failure was logged with its traceback; the files at these paths were not updated."
        raise CheckpointSaveError(message, [p for p, _ in failures]) from error

    @override
    def __repr__(self) -> str:
        threads = "" if self.copy_threads is None else f", copy_threads={self.copy_threads}"
        return f"AsyncCheckpointIO(checkpoint_io={self._checkpoint_io!r}, max_pending={self.max_pending}{threads})"


# -- the background writer ----------------------------------------------------------------


@dataclass(eq=False)
class _Job:
    checkpoint: dict[str, Any] | None
    path: str
    key: str
    storage_options: Any
    io: CheckpointIO
    slot: Slot
    events: list[torch.Event]


class _Writer:
    """One background thread, its queue, the staging slots and the failures it saw.

    It holds no reference to its :class:`AsyncCheckpointIO`, so that one can be garbage-collected
    while a write is in flight; the writer then finishes its queue and its thread ends.
    """

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.copy_pool: CopyPool | None = None
        self.reset()

    def copier(self, threads: int | None) -> CopyPool:
        """The pool that copies snapshots with ``threads`` threads (None: :func:`default_copy_threads`, now)."""
        wanted = default_copy_threads() if threads is None else threads
        pool = self.copy_pool
        if pool is None or pool.threads != wanted:
            if pool is not None:
                pool.close()
            pool = self.copy_pool = CopyPool(wanted)
        return pool

    def reset(self) -> None:
        """Forget everything (also used in a forked child, where the threads do not exist)."""
        if self.copy_pool is not None:
            self.copy_pool.forget()
        self.cond = threading.Condition()
        self.queue: deque[_Job] = deque()  # waiting for the thread
        self.pending: list[_Job] = []  # queued or being written, oldest first
        self.free_slots: list[Slot] = []
        self.slots = 0
        self.failures: list[tuple[str, BaseException]] = []
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.preparing = 0  # slots whose buffers are being reserved (see prepare)

    def acquire_slot(self) -> Slot:
        """A free staging slot; waits for the oldest write when ``max_pending`` slots are in use."""
        with self.cond:
            while not self.free_slots and self.slots >= self.max_pending:
                self._wait()
            if self.free_slots:
                return self.free_slots.pop()
            self.slots += 1
            return Slot()

    def prepare(self, sources: dict[StorageKey, torch.Tensor]) -> None:
        """Reserve staging buffers for ``sources`` in a free (or new) slot, on a short-lived background thread."""
        with self.cond:
            if self.free_slots:
                slot = self.free_slots.pop()
            elif self.slots < self.max_pending:
                self.slots += 1
                slot = Slot()
            else:
                return  # every slot holds a snapshot being written: they are reused as they are
            self.preparing += 1

        def reserve() -> None:
            try:
                slot.reserve(sources)
            except Exception as exc:  # only an optimisation: the first save allocates instead
                log.warning("Preparing the staging memory of asynchronous checkpoints failed: %r", exc)
            finally:
                with self.cond:
                    self.preparing -= 1
                    self.free_slots.append(slot)
                    self.cond.notify_all()

        threading.Thread(target=reserve, name="torchplug-checkpoint-prepare", daemon=True).start()

    def release_slot(self, slot: Slot) -> None:
        """Give back a slot whose snapshot was abandoned."""
        with self.cond:
            self.free_slots.append(slot)
            self.cond.notify_all()

    def submit(self, job: _Job) -> None:
        """Queue ``job``, starting the thread if it is not running."""
        with self.cond:
            self.pending.append(job)
            self.queue.append(job)
            self.stopping = False
            self._ensure_thread()
            self.cond.notify_all()

    def is_pending(self, key: str) -> bool:
        """Whether a save to the path ``key`` is queued or being written."""
        with self.cond:
            return any(job.key == key for job in self.pending)

    def wait_idle(self) -> None:
        """Block until nothing is queued, being written or being prepared."""
        with self.cond:
            while self.pending or self.preparing:
                self._wait()

    def pop_failures(self) -> list[tuple[str, BaseException]]:
        """The failures seen since the last call: ``(path, exception)``, oldest first."""
        with self.cond:
            failures, self.failures = self.failures, []
            return failures

    def stop(self, wait: bool = True) -> None:
        """Let the thread finish the queue and end; with ``wait``, join it."""
        with self.cond:
            thread, self.stopping = self.thread, True
            self.cond.notify_all()
        if self.copy_pool is not None:
            self.copy_pool.close()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def free_staging(self) -> None:
        """Drop the staging buffers of the slots not in use."""
        with self.cond:
            self.slots -= len(self.free_slots)
            self.free_slots.clear()

    def _wait(self) -> None:
        if self.thread is threading.current_thread():
            raise RuntimeError("The checkpoint writer thread cannot wait for itself (flush or save from a save).")
        if self.queue:
            self._ensure_thread()
        self.cond.wait()

    def _ensure_thread(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="torchplug-checkpoint-writer", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.stopping:
                    self.cond.wait()
                if not self.queue:
                    self.thread = None
                    return
                job = self.queue.popleft()
            self._write(job)
            with self.cond:
                self.pending.remove(job)
                self.free_slots.append(job.slot)
                self.cond.notify_all()

    def _write(self, job: _Job) -> None:
        try:
            for event in job.events:
                event.synchronize()
            assert job.checkpoint is not None
            job.io.save_checkpoint(job.checkpoint, job.path, storage_options=job.storage_options)
        except BaseException as error:  # the thread must survive anything, and the caller hear of it
            with self.cond:  # recorded before it is logged: whoever saw the log finds it recorded
                self.failures.append((job.path, error))
            log.error("Saving the checkpoint to %r in the background failed: %r", job.path, error, exc_info=error)
        finally:
            job.checkpoint = None  # the views on the staging buffers


def _path_key(path: str) -> str:
    """One spelling per file (``/x``, ``file:///x``, ``./x`` are the same) to match pending saves."""
    try:
        fs, fs_path = url_to_fs(str(path))
        return str(fs.unstrip_protocol(fs_path))
    except Exception:  # a wrapped IO may accept paths that fsspec does not know
        return str(path)


_WRITERS: Final[weakref.WeakSet[_Writer]] = weakref.WeakSet()


@atexit.register
def _finish_pending_writes() -> None:
    """At interpreter exit, finish every write still pending (failures were logged when they happened)."""
    for writer in list(_WRITERS):
        writer.wait_idle()


def _forget_threads_in_child() -> None:
    for writer in list(_WRITERS):
        writer.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_in_child)
