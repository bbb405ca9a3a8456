"""The ``torch`` checkpoint IO: ``torch.save``/``torch.load`` through fsspec, atomically."""

from __future__ import annotations

import os
import uuid
from typing import Any

import torch
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from torchplug.io.checkpoint_io import CheckpointIO

__all__ = ["TorchCheckpointIO", "temporary_sibling"]


def temporary_sibling(fs: AbstractFileSystem, path: str) -> str:
    """A hidden, unique name next to ``path`` (same directory, so a rename onto ``path`` is atomic)."""
    parent, _, name = path.rpartition(fs.sep)
    return f"{parent}{fs.sep}.{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class TorchCheckpointIO(CheckpointIO):
    """Save with ``torch.save`` and load with ``torch.load``, on any fsspec filesystem.

    A save writes a hidden temporary file beside the target and renames it over the target only
    once it is complete, so a crash or a kill mid-save leaves the previous checkpoint intact. On
    the local disk ``torch.save`` streams straight into that file: the checkpoint is never copied
    whole in memory.

    Args:
        fsync: Also flush the file (and its directory) to the disk before the rename, so that the
            checkpoint survives a power loss, not only a crash. Costs about 10% on a local save.
    """

    def __init__(self, fsync: bool = False) -> None:
        self.fsync = fsync

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically (see the class docstring)."""
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r} is not supported by TorchCheckpointIO. "
                "Hint: pass filesystem options in the URL, or implement a CheckpointIO that takes them."
            )
        fs, fs_path = url_to_fs(str(path))
        fs.makedirs(fs._parent(fs_path), exist_ok=True)
        tmp = temporary_sibling(fs, fs_path)
        try:
            if isinstance(fs, LocalFileSystem):
                self._save_local(checkpoint, tmp, fs_path)
            else:
                with fs.open(tmp, "wb") as stream:
                    torch.save(checkpoint, stream)
                fs.mv(tmp, fs_path)
        except BaseException:
            _remove_quietly(fs, tmp)
            raise

    def _save_local(self, checkpoint: dict[str, Any], tmp: str, path: str) -> None:
        torch.save(checkpoint, tmp)  # a path, not a stream: torch writes it with no Python-level copy
        if self.fsync:
            _fsync(tmp)
        os.replace(tmp, path)
        if self.fsync:
            _fsync(os.path.dirname(path) or ".")

    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the checkpoint at ``path`` (``weights_only=True`` unless the caller trusts the file)."""
        fs, fs_path = url_to_fs(str(path))
        if not fs.exists(fs_path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        if isinstance(fs, LocalFileSystem):
            return torch.load(fs_path, map_location=map_location, weights_only=weights_only)  # type: ignore[no-any-return]
        with fs.open(fs_path, "rb") as stream:
            return torch.load(stream, map_location=map_location, weights_only=weights_only)  # type: ignore[no-any-return]

    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path``; nothing happens if it is already gone."""
        fs, fs_path = url_to_fs(str(path))
        if fs.exists(fs_path):
            fs.rm(fs_path, recursive=True)

    def __repr__(self) -> str:
        return f"TorchCheckpointIO(fsync={self.fsync})"


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path)
    except Exception:  # the original error matters more than a failed clean-up
        pass
