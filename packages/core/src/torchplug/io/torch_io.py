"""The ``torch`` checkpoint IO: ``torch.save``/``torch.load`` through fsspec, atomically."""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import re
import socket
import stat
import sys
import uuid
from typing import TYPE_CHECKING, Any, Final

import torch
from typing_extensions import override

from torchplug._errors import CheckpointLoadError
from torchplug.io._digest import IntegrityError, seal_file, verify_file
from torchplug.io.checkpoint_io import CheckpointIO

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = ["TorchCheckpointIO", "remove_stale_temporaries", "temporary_sibling"]

#: ``.<name>.tmp-<host>-<pid>-<8 hex>`` (and ``.<name>.tmp-<pid>-<8 hex>``, written by earlier versions).
_TEMPORARY: Final = re.compile(r"^\.(?P<name>.+)\.tmp-(?:(?P<host>.+)-)?(?P<pid>\d+)-[0-9a-f]{8}$")


def _host() -> str:
    return socket.gethostname().replace("/", "_") or "localhost"


def temporary_sibling(fs: AbstractFileSystem, path: str) -> str:
    """A hidden, unique name next to ``path`` (same directory, so a rename onto ``path`` is atomic).

    The name records the writer's host and process id, so that the temporary file of a writer that
    was killed can be recognised and removed later (:func:`remove_stale_temporaries`).
    """
    parent, _, name = path.rpartition(fs.sep)
    return f"{parent}{fs.sep}.{name}.tmp-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale_temporaries(directory: str) -> list[str]:
    """Delete the temporary files that killed writers left in the local ``directory``; return their paths.

    A temporary file (see :func:`temporary_sibling`) is stale when it was written on this host by a
    process that no longer exists. Files of live processes (a save in progress, in this process or
    another) and of other hosts (a shared filesystem) are left alone.
    """
    try:
        names = os.listdir(directory)
    except OSError:  # no directory yet, or not readable: nothing of ours to clean
        return []
    host, removed = _host(), []
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None or match["host"] not in (None, host) or _process_exists(int(match["pid"])):
            continue
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
        except OSError:  # removed by another process meanwhile, or not ours to remove
            continue
        removed.append(path)
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        return True
    return True


def _url_to_fs(path: str) -> tuple[AbstractFileSystem, str, bool]:
    # fsspec is imported on first use: building a Trainer should not pay for it.
    from fsspec.core import url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    fs, fs_path = url_to_fs(str(path))
    return fs, fs_path, isinstance(fs, LocalFileSystem)


class TorchCheckpointIO(CheckpointIO):
    """Save with ``torch.save`` and load with ``torch.load``, on any fsspec filesystem.

    A save writes a hidden temporary file beside the target and renames it over the target only
    once it is complete, so a crash or a kill mid-save leaves the previous checkpoint intact. On
    the local disk ``torch.save`` streams straight into that file: the checkpoint is never copied
    whole in memory. The file is then sealed (:mod:`torchplug.io._digest`): a digest of its
    records' checksums, which ``torch.save`` computes while writing, goes into the zip archive's
    comment, so the file stays an ordinary ``torch.load``-able checkpoint. Without ``fsync`` an
    existing checkpoint is swapped out by an atomic exchange of names (``renameat2``), then deleted:
    a plain ``rename()`` over it would make ext4 (``auto_da_alloc``) write the new file back inside
    the call.

    A load verifies the seal and every record's checksum before ``torch.load`` reads the file
    (memory-mapped: the verification reads the file once and the tensors share those pages),
    and raises :class:`~torchplug.CheckpointLoadError` naming the file and the record that
    differs. A file without a seal (Lightning's, an older torchplug's) is loaded as before, said
    once per process.

    Args:
        fsync: Also flush the file (and its directory) to the disk before the rename, so that the
            checkpoint survives a power loss, not only a crash or a kill. Costs about 10% on a
            local save. Without it a completed save survives a crash or a kill of the process, and
            the data reach the disk with the kernel's write-back (seconds later).
        verify: Check the digest on load (the default). False: load as ``torch.load`` does.
    """

    def __init__(self, fsync: bool = False, verify: bool = True) -> None:
        self.fsync = fsync
        self.verify = verify

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically (see the class docstring)."""
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r} is not supported by TorchCheckpointIO. "
                "Hint: pass filesystem options in the URL, or implement a CheckpointIO that takes them."
            )
        fs, fs_path, local = _url_to_fs(path)
        fs.makedirs(fs._parent(fs_path), exist_ok=True)
        if local:
            _warn_removed(remove_stale_temporaries(os.path.dirname(fs_path) or "."))
        tmp = temporary_sibling(fs, fs_path)
        try:
            if local:
                self._save_local(checkpoint, tmp, fs_path)
            else:
                with fs.open(tmp, "wb") as stream:
                    torch.save(checkpoint, stream)
                fs.mv(tmp, fs_path)
        except Exception as exc:
            full = local and _disk_full(exc, os.path.dirname(fs_path) or ".")
            written = _size(tmp) if full else 0
            _remove_quietly(fs, tmp)
            if full:
                raise OSError(
                    errno.ENOSPC,
                    f"No space left on device: saving the checkpoint to {path} stopped after {written} bytes. "
                    f"The file at {path} was not changed (any earlier checkpoint there is intact). Hint: free "
                    "space on that filesystem, or save elsewhere (ModelCheckpoint(dirpath=...), default_root_dir=...)",
                    path,
                ) from exc
            raise
        except BaseException:
            _remove_quietly(fs, tmp)
            raise

    def _save_local(self, checkpoint: dict[str, Any], tmp: str, path: str) -> None:
        torch.save(checkpoint, tmp)  # a path, not a stream: torch writes it with no Python-level copy
        seal_file(tmp)
        if self.fsync:
            _fsync(tmp)
        _replace(tmp, path, self.fsync)
        if self.fsync:
            _fsync(os.path.dirname(path) or ".")

    @override
    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the checkpoint at ``path`` (``weights_only=True`` unless the caller trusts the file)."""
        fs, fs_path, local = _url_to_fs(path)
        if not fs.exists(fs_path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        if local:
            _warn_removed(remove_stale_temporaries(os.path.dirname(fs_path) or "."))
        checkpoint: Any
        mapped = local and self.verify and self._verified(fs_path, path)
        try:
            if local:
                checkpoint = torch.load(fs_path, map_location=map_location, weights_only=weights_only, mmap=mapped)
            else:
                with fs.open(fs_path, "rb") as stream:
                    checkpoint = torch.load(stream, map_location=map_location, weights_only=weights_only)
        except (MemoryError, OSError) as exc:  # reading failed (the disk, the network): that error is the news
            if not isinstance(exc, IsADirectoryError):
                raise
            raise CheckpointLoadError(_why_unreadable(fs, fs_path, path, exc)) from exc
        except Exception as exc:  # torch's readers raise anything on bytes they do not understand
            raise CheckpointLoadError(_why_unreadable(fs, fs_path, path, exc)) from exc
        if not isinstance(checkpoint, dict):
            raise CheckpointLoadError(
                f"Cannot load the checkpoint {path}: it holds a {type(checkpoint).__name__}, not a checkpoint (a "
                "dict of tensors and plain data). Hint: pass the path of a checkpoint written by a Trainer."
            )
        return checkpoint

    @staticmethod
    def _verified(fs_path: str, path: str) -> bool:
        """Verify the local zip checkpoint at ``fs_path``; whether it is one (then it can be memory-mapped).

        Raises:
            CheckpointLoadError: The file is cut short, or its bytes differ from those written.
        """
        try:
            with open(fs_path, "rb") as stream:
                if stream.read(4) != b"PK\x03\x04":
                    return False  # torch's legacy format, or no checkpoint at all: torch.load says which
            found = verify_file(fs_path, name=path)
        except IntegrityError as exc:
            raise CheckpointLoadError(
                f"Cannot load the checkpoint {path}: {exc.reason}. The file is not as it was written: damaged on "
                "storage or in a copy, or cut short. Hint: resume from an earlier checkpoint; `core checkpoint verify "
                "PATH` checks one without loading it."
            ) from exc
        except OSError:
            return False  # unreadable here: torch.load reports it
        if not found.sealed:
            _say_unsealed_once(path)
        return True

    @override
    def exists(self, path: str) -> bool:
        """Whether a checkpoint is at ``path``: a file, or a directory (DeepSpeed's, a sharded one) but not a torn save.

        A directory of DCP shards without its metadata is a sharded save that never finished
        (strategies read complete sharded directories whatever their IO): it is no checkpoint.
        """
        from torchplug.io._dcp_layout import is_unfinished

        fs, fs_path, _ = _url_to_fs(path)
        return bool(fs.exists(fs_path)) and not is_unfinished(fs, str(fs_path).rstrip("/") or "/")

    @override
    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path``; nothing happens if it is already gone."""
        fs, fs_path, _ = _url_to_fs(path)
        if fs.exists(fs_path):
            fs.rm(fs_path, recursive=True)

    @override
    def __repr__(self) -> str:
        verify = "" if self.verify else ", verify=False"
        return f"TorchCheckpointIO(fsync={self.fsync}{verify})"


def _replace(tmp: str, path: str, durable: bool) -> None:
    """``os.replace(tmp, path)``, without ext4's implicit write-back when ``durable`` is False.

    Renaming over an existing file makes ext4 (``auto_da_alloc``) write the new file back inside
    ``rename()``, which costs a third of a save. An atomic exchange of the two names does not; the
    old file, now under the hidden name, is then deleted. Either way the final name always holds a
    complete checkpoint; power-loss safety is what ``fsync=True`` is for.
    """
    if durable or _renameat2 is None or not _is_file(path):
        os.replace(tmp, path)
        return
    if _renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0:
        os.unlink(tmp)  # the previous checkpoint
        return
    os.replace(tmp, path)  # ENOENT: nothing to replace; EINVAL/ENOSYS: no exchange on this filesystem or kernel


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _load_renameat2() -> Any:
    if sys.platform != "linux":
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = _load_renameat2()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why_unreadable(fs: AbstractFileSystem, fs_path: str, path: str, exc: BaseException) -> str:
    """The message for a file ``torch.load`` could not read: what the file is, and why it failed."""
    prefix = f"Cannot load the checkpoint {path}"
    if fs.isdir(fs_path):
        return f"{prefix}: it is a directory, not a checkpoint file. Hint: give the path of the .ckpt file in it."
    size = fs.size(fs_path) or 0
    if size == 0:
        return (
            f"{prefix}: the file is empty (0 bytes). It was never written completely: the save that created it "
            "was interrupted, or its disk was full. Hint: resume from an earlier checkpoint."
        )
    with fs.open(fs_path, "rb") as stream:
        head = stream.read(4)
    if head == b"PK\x03\x04":  # a zip archive: torch's format, so the file is cut short or damaged
        if isinstance(exc, pickle.UnpicklingError):
            first = str(exc).strip().splitlines()
            refused = next((line.strip() for line in first if "GLOBAL" in line or "Unsupported" in line), first[0])
            return (
                f"{prefix}: it holds Python objects that the safe loader does not run ({refused}). torchplug "
                "writes checkpoints of tensors and plain data only, so this file came from elsewhere or a callback "
                "stored such an object in it. Hint: if you trust the file, allow that one class with "
                "torch.serialization.add_safe_globals([...])."
            )
        return (
            f"{prefix}: the file ({size} bytes) is truncated or damaged ({_first_line(exc)}). The Trainer's saves "
            "are atomic and never leave such a file; a copy cut short, or a disk that filled up during a copy, "
            "does. Hint: resume from an earlier checkpoint."
        )
    kind = "a plain pickle, not a torch checkpoint" if head[:1] == b"\x80" else f"not a checkpoint (it starts {head!r})"
    return (
        f"{prefix}: the file ({size} bytes) is {kind}; torch.load failed with {type(exc).__name__}. Hint: give "
        "the path of a checkpoint written by a Trainer or by torch.save."
    )


def _first_line(exc: BaseException) -> str:
    """``Type: the first sentence of the message``."""
    lines = str(exc).strip().splitlines()
    first = lines[0].split(". ")[0].rstrip(".")[:200] if lines else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


_SAID_UNSEALED: set[str] = set()


def _say_unsealed_once(path: str) -> None:
    """Log once per process that checkpoints without a digest are loaded unverified."""
    if _SAID_UNSEALED:
        return
    _SAID_UNSEALED.add(path)
    from torchplug.utilities.rank_zero import log

    log.info(
        "%s carries no digest (written by Lightning, torch.save or an older torchplug): it is loaded without "
        "verification (said once). Saving it again with torchplug adds one.",
        path,
    )


def _warn_removed(paths: list[str]) -> None:
    if paths:
        from torchplug.utilities.rank_zero import log

        log.warning("removed %d temporary file(s) left by killed checkpoint saves: %s", len(paths), ", ".join(paths))


def _disk_full(exc: BaseException, directory: str) -> bool:
    """Whether a failed save ran out of space: ENOSPC/EDQUOT, or torch's writer failing on a full filesystem."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    try:
        usage = os.statvfs(directory)
    except OSError:
        return False
    return usage.f_bavail * usage.f_frsize < _FULL_BELOW


#: Free bytes below which a write that failed is put down to a full disk (torch's writer gives no errno).
_FULL_BELOW: Final = 1 << 20


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path)
    except Exception:  # the original error matters more than a failed clean-up
        pass
