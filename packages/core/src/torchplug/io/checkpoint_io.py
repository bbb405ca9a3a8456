"""The CheckpointIO base class: how checkpoints are written, read and removed.

Paths are fsspec URLs (``/local/path``, ``memory://x``, ``s3://bucket/key``...). This module
imports no torch at import time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from typing_extensions import override

if TYPE_CHECKING:
    from torchplug._registry import Registry

__all__ = ["CheckpointIO"]


class CheckpointIO(ABC):
    """Writes, reads and removes checkpoints.

    Implementations must write atomically: a failure or a kill in the middle of
    :meth:`save_checkpoint` leaves any earlier file at ``path`` intact, and never leaves a
    half-written file under the final name.

    The accelerator names the checkpoint IO it needs (``Accelerator.default_checkpoint_io``), a
    strategy may name one too (``FSDPStrategy(state_dict_type="sharded")`` needs ``dcp``), and the
    user may pick another with ``plugins=["async"]`` or an instance.

    Attributes:
        collective: False (the default): global rank 0 alone calls :meth:`save_checkpoint`, with the
            whole checkpoint, and every process may call :meth:`load_checkpoint` on its own. True:
            the checkpoint is sharded, and **every** process calls :meth:`save_checkpoint` at the same
            point with its own shards (tensors such as ``DTensor`` that know their place in the whole)
            and :meth:`load_distributed` to read its shards back; such an IO decides how to split and
            join them (``dcp``: ``torch.distributed.checkpoint``). :meth:`remove_checkpoint` and
            :meth:`exists` still run on one process.
    """

    collective: ClassVar[bool] = False

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` (a dict of tensors and plain data) to ``path``, atomically.

        Args:
            checkpoint: What to write.
            path: An fsspec URL or local path; missing parent directories are created.
            storage_options: Backend-specific options; raise ``TypeError`` for options you do not support.
        """

    @abstractmethod
    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the checkpoint at ``path``.

        Args:
            path: An fsspec URL or local path.
            map_location: Where to put the tensors (as in ``torch.load``).
            weights_only: Refuse to unpickle anything but tensors and plain data (the safe default);
                pass False only for checkpoints you trust.

        Raises:
            FileNotFoundError: Nothing at ``path``; the message names it.
        """

    @abstractmethod
    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path`` (no error if it is already gone)."""

    def load_distributed(self, path: str, target: dict[str, Any], weights_only: bool = True) -> dict[str, Any]:
        """Read a sharded checkpoint into ``target``'s tensors, on every process (:attr:`collective` IOs only).

        Args:
            path: An fsspec URL or local path.
            target: What this process holds now, in the form it saves: ``{"state_dict": ...,
                "optimizer_states": [...]}`` whose tensors (``DTensor`` shards, or whole tensors) are
                overwritten in place with the checkpoint's values, resharded to this run's layout
                (the checkpoint may come from another number of processes).
            weights_only: As for :meth:`load_checkpoint`.

        Returns:
            The whole checkpoint: ``target``'s entries, filled in, and every other entry.

        Raises:
            NotImplementedError: This IO is not collective.
        """
        raise NotImplementedError(
            f"{type(self).__name__} writes whole checkpoints from one process; it has no load_distributed(). "
            "Hint: use load_checkpoint(), or a collective checkpoint IO such as 'dcp' for sharded checkpoints."
        )

    def prepare(self, checkpoint: dict[str, Any]) -> None:
        """Allocate now, ahead of the first save, what saving checkpoints like ``checkpoint`` will need.

        The Trainer calls it on every process once per ``fit``, after every optimizer has taken
        its first step (so that lazily created optimizer state exists), with the tensors a
        checkpoint of the run holds (``{"state_dict": ..., "optimizer_states": [...]}``), not a
        complete checkpoint. Nothing may be written. An asynchronous IO allocates its staging
        memory here, in the background, so that no save blocks the training loop for allocating
        it. Default: nothing to do.
        """

    def exists(self, path: str) -> bool:
        """Whether a complete checkpoint is at ``path`` (a file or a directory).

        ``ckpt_path="last"``/``"auto"`` and ``ModelCheckpoint`` choose only among checkpoints that
        exist by this test, so an IO whose saves can leave something unfinished under the final
        name must not count it (the ``dcp`` IO counts a directory only once its metadata is
        written; the ``torch`` IO skips a directory of DCP shards without it). Default: anything
        fsspec finds at ``path``.
        """
        from fsspec.core import url_to_fs  # on first use: building a Trainer should not pay for fsspec

        fs, fs_path = url_to_fs(str(path))
        return bool(fs.exists(str(fs_path).rstrip("/") or "/"))

    def flush(self) -> None:
        """Block until every save started so far is complete and durable; raise a failed save's error.

        Synchronous IO has nothing to do. Asynchronous IO must implement this: the Trainer calls it
        before rotating old checkpoints, before requeueing a job and at the end of a run.
        """

    def teardown(self) -> None:
        """Release resources at the end of a run (after :meth:`flush`)."""
        self.flush()

    @classmethod
    def register_checkpoint_io(cls, registry: Registry[CheckpointIO]) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``."""

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
