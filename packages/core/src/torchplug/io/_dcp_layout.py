"""The layout of a sharded checkpoint directory on any fsspec filesystem, and its atomic life cycle.

A sharded checkpoint is a directory written by ``torch.distributed.checkpoint`` ("DCP"): one or more
data files per process (``__<rank>_<n>.distcp``) and a ``.metadata`` file, which DCP's coordinator
writes last, once every process has written its data. This module knows nothing of torch: it names
the files, tells a complete checkpoint from an incomplete one, and makes a finished directory appear
under its final name atomically (and disappear the same way). :mod:`torchplug.io.dcp_io` writes the
contents.

A directory is **complete** when its ``.metadata`` exists. Saves write into a hidden sibling
(``.<name>.tmp-<token>``) and rename it onto the final name only when complete, so a reader never
sees a final name without every shard: on the local disk the rename is atomic (an existing
checkpoint of that name is swapped out in one ``renameat2(RENAME_EXCHANGE)``); on other fsspec
filesystems, which have no directory rename, the data files move first and ``.metadata`` last, and
the old checkpoint of that name loses its ``.metadata`` before anything else of it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
import uuid
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "COMMON_KEY",
    "METADATA_FILE",
    "RANK_KEY_PREFIX",
    "commit_directory",
    "is_complete",
    "is_distributed_checkpoint",
    "is_unfinished",
    "remove_directory",
    "remove_in_background",
    "temporary_directory",
    "url_to_fs",
    "wait_for_removals",
]

#: DCP's metadata file: written last, by the coordinator, once every shard is on storage.
METADATA_FILE: Final = ".metadata"
#: The entry holding rank 0's copy of everything but the model and optimizer states (one pickled blob).
COMMON_KEY: Final = "torchplug.common"
#: ``torchplug.rank<N>``: process N's own entries (its random state...), one blob per process.
RANK_KEY_PREFIX: Final = "torchplug.rank"


def url_to_fs(path: str, storage_options: dict[str, object] | None = None) -> tuple[AbstractFileSystem, str, bool]:
    """The fsspec filesystem of ``path``, the path within it, and whether it is the local disk."""
    from fsspec.core import url_to_fs as fsspec_url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    fs, fs_path = fsspec_url_to_fs(str(path), **(storage_options or {}))
    return fs, str(fs_path).rstrip("/") or "/", isinstance(fs, LocalFileSystem)


def is_complete(fs: AbstractFileSystem, fs_path: str) -> bool:
    """Whether ``fs_path`` is a sharded checkpoint directory whose ``.metadata`` has been written."""
    return bool(fs.isdir(fs_path) and fs.exists(f"{fs_path}/{METADATA_FILE}"))


def is_unfinished(fs: AbstractFileSystem, fs_path: str) -> bool:
    """Whether ``fs_path`` holds DCP shards (``*.distcp``) but no ``.metadata``: a save that never ended."""
    if not fs.isdir(fs_path) or fs.exists(f"{fs_path}/{METADATA_FILE}"):
        return False
    return any(str(p).endswith(".distcp") for p in fs.ls(fs_path, detail=False))


def is_distributed_checkpoint(path: str) -> bool:
    """Whether ``path`` (a local path or fsspec URL) is a complete sharded (DCP) checkpoint directory."""
    try:
        fs, fs_path, _ = url_to_fs(path)
        return is_complete(fs, fs_path)
    except (OSError, ValueError):  # an unknown protocol or an unreachable store is not a sharded checkpoint
        return False


def temporary_directory(fs_path: str, token: str | None = None) -> str:
    """A hidden sibling of ``fs_path`` to write into (same parent, so the final rename stays on one filesystem)."""
    parent, _, name = fs_path.rpartition("/")
    return f"{parent}/.{name}.tmp-{token or uuid.uuid4().hex[:12]}"


def commit_directory(fs: AbstractFileSystem, tmp: str, final: str, local: bool) -> None:
    """Make the complete directory ``tmp`` appear as ``final``, replacing what was there.

    Raises:
        FileNotFoundError: ``tmp`` holds no ``.metadata`` (the save did not finish); nothing is changed.
    """
    if not fs.exists(f"{tmp}/{METADATA_FILE}"):
        raise FileNotFoundError(f"{tmp!r} holds no {METADATA_FILE}: the sharded save did not finish")
    if local:
        _commit_local(tmp, final)
    else:
        _commit_fsspec(fs, tmp, final)


def _commit_local(tmp: str, final: str) -> None:
    from torchplug.io.torch_io import _AT_FDCWD, _RENAME_EXCHANGE, _renameat2

    if not os.path.lexists(final):
        try:
            os.rename(tmp, final)
            return
        except OSError:  # created meanwhile (a non-empty directory cannot be renamed over): swap below
            pass
    if (
        _renameat2 is not None
        and _renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(final), _RENAME_EXCHANGE) == 0
    ):
        remove_in_background(tmp)  # the previous checkpoint, now under the hidden name
        return
    # No atomic exchange here (another OS or filesystem): move the old one aside first, so the final
    # name is briefly absent, never incomplete.
    old = temporary_directory(final, "old-" + uuid.uuid4().hex[:12])
    os.rename(final, old)
    os.rename(tmp, final)
    remove_in_background(old)


def remove_in_background(path: str) -> None:
    """Delete a replaced checkpoint, already hidden, without holding up the save (freeing gigabytes takes a while).

    :func:`wait_for_removals` (called by the IO's ``flush``, and at exit) waits for it; should the
    process be killed first, the hidden directory stays behind, where nothing picks it.
    """
    thread = threading.Thread(target=_remove_local, args=(path,), name="torchplug-remove-replaced", daemon=True)
    with _REMOVALS_LOCK:
        _REMOVALS.add(thread)
    thread.start()


def wait_for_removals() -> None:
    """Block until every replaced checkpoint being deleted in the background is gone."""
    with _REMOVALS_LOCK:
        threads = list(_REMOVALS)
        _REMOVALS.difference_update(threads)
    for thread in threads:
        thread.join()


_REMOVALS: set[threading.Thread] = set()
_REMOVALS_LOCK = threading.Lock()
atexit.register(wait_for_removals)


def _commit_fsspec(fs: AbstractFileSystem, tmp: str, final: str) -> None:
    if fs.exists(final):
        remove_directory(fs, final, local=False)
    metadata = f"{tmp}/{METADATA_FILE}"
    for source in sorted(str(p) for p in fs.find(tmp)):
        if source != metadata:
            fs.mv(source, final + source[len(tmp) :])
    fs.mv(metadata, f"{final}/{METADATA_FILE}")  # last: from here on the checkpoint is complete
    if fs.exists(tmp):
        fs.rm(tmp, recursive=True)


def remove_directory(fs: AbstractFileSystem, fs_path: str, local: bool) -> None:
    """Delete the checkpoint at ``fs_path`` (a directory or a file) so that it never looks complete meanwhile."""
    if local:
        if os.path.isdir(fs_path) and not os.path.islink(fs_path):
            hidden = temporary_directory(fs_path, "removing-" + uuid.uuid4().hex[:12])
            os.rename(fs_path, hidden)  # atomic: gone from its name at once
            _remove_local(hidden)
        elif os.path.lexists(fs_path):
            os.unlink(fs_path)
        return
    if not fs.exists(fs_path):
        return
    if fs.isdir(fs_path):
        metadata = f"{fs_path}/{METADATA_FILE}"
        if fs.exists(metadata):
            fs.rm(metadata)  # first: a half-removed directory is incomplete, never a torn checkpoint
        fs.rm(fs_path, recursive=True)
    else:
        fs.rm(fs_path)


def _remove_local(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
