"""The CheckpointIO base class: how checkpoints are written, read and removed.

Paths are fsspec URLs (``/local/path``, ``memory://x``, ``s3://bucket/key``...). This module
imports no torch at import time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from typing_extensions import override

if TYPE_CHECKING:
    from torchplug._registry import Registry

__all__ = ["CheckpointIO"]


class CheckpointIO(ABC):
    """Writes, reads and removes checkpoints.

    Implementations must write atomically: a failure or a kill in the middle of
    :meth:`save_checkpoint` leaves any earlier file at ``path`` intact, and never leaves a
    half-written file under the final name.

    A checkpoint IO has no class attributes for the core to read: the accelerator names the one
    it needs (``Accelerator.default_checkpoint_io``), and the user may pick another with
    ``plugins=["async"]`` or an instance.
    """

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

    def exists(self, path: str) -> bool:
        """Whether a checkpoint exists at ``path``. Default: ask fsspec."""
        from fsspec.core import url_to_fs

        fs, fs_path = url_to_fs(path)
        return bool(fs.exists(fs_path))

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
