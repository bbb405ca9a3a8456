"""Reading a checkpoint of any format in one process: inspecting it, and consolidating a sharded one into one file.

Three formats are known: an ordinary checkpoint file (``torch.save``, what ``TorchCheckpointIO``
writes), a sharded checkpoint directory (``torch.distributed.checkpoint``, what the ``dcp`` IO
writes), and any format a plugin offers through the ``torchplug_checkpoint_reader`` hook
(strategy-deepspeed offers DeepSpeed's checkpoint directories). Used by ``core checkpoint
inspect|consolidate`` and by ``Module.load_from_checkpoint``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Final

import torch

from torchplug._errors import CheckpointLoadError, MisconfigurationError
from torchplug.io._dcp_layout import COMMON_KEY, RANK_KEY_PREFIX, is_complete, url_to_fs
from torchplug.io._digest import IntegrityError, Verification, verify_file
from torchplug.io.torch_io import TorchCheckpointIO

__all__ = [
    "TRAINING_STATE",
    "consolidate_checkpoint",
    "inspect_checkpoint",
    "read_checkpoint",
    "read_weights",
    "verify_checkpoint",
]

#: Entries of a checkpoint that describe training in progress, kept out of a consolidated file.
TRAINING_STATE: Final = frozenset(
    {
        "loops",
        "optimizer_states",
        "lr_schedulers",
        "precision",
        "rng",
        "callbacks",
        "datamodule",
        "accumulated_gradients",
    }
)
FILE: Final = "file"
SHARDED: Final = "sharded"

Reader = Callable[[str], dict[str, Any]]


def checkpoint_format(path: str) -> tuple[str, Reader | None]:
    """The format of the checkpoint at ``path``: ``"file"``, ``"sharded"``, or a plugin's (with its reader).

    Raises:
        FileNotFoundError: Nothing at ``path``.
        MisconfigurationError: Something is there, but no known format: an incomplete sharded directory,
            or a directory no plugin recognises.
    """
    fs, fs_path, _ = url_to_fs(path)
    if fs.isfile(fs_path):
        return FILE, None
    if is_complete(fs, fs_path):
        return SHARDED, None
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"Checkpoint not found: {path}")
    found = _plugin_reader(path)
    if found is not None:
        return found
    raise MisconfigurationError(
        f"{path!r} is a directory but no checkpoint this installation can read: not a complete sharded checkpoint "
        "(no .metadata: its save did not finish?), and no plugin recognised it. Hint: give a .ckpt file or a "
        "sharded checkpoint directory; for DeepSpeed directories, pip install strategy-deepspeed."
    )


def _plugin_reader(path: str) -> tuple[str, Reader] | None:
    from torchplug._host import plugin_host

    for record, result, error in plugin_host().call_each("torchplug_checkpoint_reader", path=path):
        if error is None and result is not None:
            module, _, name = str(result).partition(":")
            reader: Reader = getattr(importlib.import_module(module), name)
            return f"{record.distribution or record.name}", reader
    return None


def read_checkpoint(path: str, weights_only: bool = True, training_state: bool = True) -> tuple[str, dict[str, Any]]:
    """The whole checkpoint at ``path``, any format, in this process (sharded tensors joined): its format and contents.

    Args:
        path: A local path or fsspec URL.
        weights_only: Unpickle only tensors and plain data (pass False only for checkpoints you trust).
        training_state: Also read the optimizer states (the biggest part after the weights).
    """
    kind, reader = checkpoint_format(path)
    if kind == FILE:
        return kind, TorchCheckpointIO().load_checkpoint(path, map_location="cpu", weights_only=weights_only)
    if kind == SHARDED:
        from torchplug.io.dcp_io import read_full

        keep = None if training_state else (lambda key: not key.startswith("optimizer_states."))
        return kind, read_full(path, weights_only=weights_only, keep=keep)
    assert reader is not None
    return kind, reader(path)


def read_weights(path: str, map_location: Any = None, weights_only: bool = True) -> dict[str, Any]:
    """What ``Module.load_from_checkpoint`` needs of the checkpoint at ``path`` (a file or a sharded directory).

    A sharded directory is read without its optimizer states.
    """
    fs, fs_path, _ = url_to_fs(path)
    if not fs.isfile(fs_path) and is_complete(fs, fs_path):
        from torchplug.io.dcp_io import read_full

        device = torch.device(map_location) if isinstance(map_location, (str, torch.device)) else None
        keep = lambda key: not key.startswith("optimizer_states.")  # noqa: E731
        return read_full(path, weights_only=weights_only, device=device, keep=keep)
    return TorchCheckpointIO().load_checkpoint(path, map_location=map_location or "cpu", weights_only=weights_only)


def consolidate_checkpoint(
    path: str | os.PathLike[str], output: str | os.PathLike[str], weights_only: bool = True
) -> str:
    """Write the checkpoint at ``path`` (a sharded directory, or any format a plugin reads) as one ordinary file.

    The file holds the whole weights (joined from every process's shards), the hyperparameters,
    the epoch, the step and the versions: what ``Module.load_from_checkpoint(output)`` needs, on any
    device and without a process group. The training state (optimizer, loops, random states...)
    stays out: a run resumes from the sharded directory itself, on any number of processes.
    Also on the command line: ``core checkpoint consolidate PATH OUTPUT``.

    Args:
        path: The checkpoint to consolidate (a local path or fsspec URL).
        output: Where to write (a local path or fsspec URL), atomically.
        weights_only: Unpickle only tensors and plain data (pass False only for checkpoints you trust).

    Returns:
        ``output``, as a string.

    Raises:
        FileNotFoundError: Nothing at ``path``.
        MisconfigurationError: ``path`` is in no format this installation reads.
    """
    _, checkpoint = read_checkpoint(os.fspath(path), weights_only=weights_only, training_state=False)
    consolidated = {k: v for k, v in checkpoint.items() if k not in TRAINING_STATE}
    target = os.fspath(output)
    TorchCheckpointIO().save_checkpoint(consolidated, target)
    return target


def verify_checkpoint(path: str | os.PathLike[str]) -> Verification:
    """Check the checkpoint at ``path`` (a file or a sharded directory) against what was recorded when it was written.

    Nothing is unpickled. A file without torchplug's seal still has torch's per-record CRC-32
    checked. Also on the command line: ``core checkpoint verify PATH``.

    Raises:
        IntegrityError: A record, the directory's digest or a shard differs, or a file is cut short.
        FileNotFoundError: Nothing at ``path``.
        MisconfigurationError: A directory in no format that carries checksums (no ``.metadata``).
    """
    text = os.fspath(path)
    kind, _ = checkpoint_format(text)
    fs, fs_path, local = url_to_fs(text)
    if kind == FILE:
        with fs.open(fs_path, "rb") as stream:
            head = stream.read(4)
            if head[:1] == b"\x80":  # torch.save's legacy format (a pickle stream): nothing was recorded to check
                return Verification(sealed=False, records=0, bytes=0)
            if head != b"PK\x03\x04":
                size = int(fs.size(fs_path))
                what = "empty (0 bytes)" if not size else f"not a checkpoint (it starts {head!r})"
                raise CheckpointLoadError(f"Cannot read the checkpoint {text}: the file is {what}.")
            if not local:
                return verify_file(text, stream=stream, check_unsealed=True)
        return verify_file(fs_path, check_unsealed=True, name=text)
    if kind == SHARDED:
        from torchplug.io.dcp_io import verify_sharded

        return verify_sharded(text)
    raise MisconfigurationError(
        f"{text!r} is a {kind} checkpoint, which records no checksums that torchplug can check. Hint: verify "
        "checkpoint files and sharded (DCP) directories."
    )


def inspect_checkpoint(path: str | os.PathLike[str], weights_only: bool = True) -> dict[str, Any]:
    """What the checkpoint at ``path`` holds, as plain data: keys, tensor shapes, steps, versions, sizes.

    A sharded directory is described from its metadata and rank 0's small entries (its tensors are
    not read); a file is memory-mapped when local. Also on the command line: ``core checkpoint inspect PATH``.

    Returns:
        ``path``, ``format``, ``bytes`` (on storage), ``processes`` (that wrote a sharded one),
        ``keys`` (top-level entries), ``epoch``, ``global_step``, the versions, ``tensors``
        (``state_dict`` entries: shape and dtype), ``parameters`` (their element count),
        ``optimizers`` (per optimizer: state entries and parameter groups), ``lr_schedulers``,
        ``callbacks`` (their state keys), ``hyper_parameters``, and ``verified`` (True: intact, as
        recorded when it was written; False: no digest to check; None: a plugin's format) with
        ``integrity``, what the check found in words.

    Raises:
        CheckpointLoadError: The checkpoint is damaged or cut short (the message names the file and the part).
    """
    text = os.fspath(path)
    kind, reader = checkpoint_format(text)
    size: int | None
    if kind in (FILE, SHARDED):
        try:
            found = verify_checkpoint(text)
        except CheckpointLoadError:  # not a checkpoint at all: the loader below names what it is
            found = Verification(sealed=False, records=0, bytes=0)
        except IntegrityError as exc:
            raise CheckpointLoadError(f"Cannot read the checkpoint {text}: {exc}") from exc
        integrity = {"verified": found.records > 0 and (found.sealed or kind == SHARDED), "integrity": found.describe()}
    else:
        integrity = {"verified": None, "integrity": None}
    if kind == SHARDED:
        return {**_describe_sharded(text, weights_only), **integrity}
    if kind == FILE:
        fs, fs_path, local = url_to_fs(text)
        checkpoint = _load_file(text, fs_path if local else None, weights_only)
        size = int(fs.size(fs_path))
    else:
        assert reader is not None
        checkpoint, size = reader(text), _size(text)
    tensors = {
        k: {"shape": list(v.shape), "dtype": _dtype(v.dtype)}
        for k, v in checkpoint.get("state_dict", {}).items()
        if isinstance(v, torch.Tensor)
    }
    summary = _summary(path=text, kind=kind, size=size, processes=None, checkpoint=checkpoint, tensors=tensors)
    return {**summary, **integrity}


def _load_file(path: str, local_path: str | None, weights_only: bool) -> dict[str, Any]:
    """The checkpoint file at ``path``, memory-mapped when it is local (``local_path``) and can be.

    What cannot be mapped (an older ``torch.save`` format, or no checkpoint at all) is read whole
    by ``TorchCheckpointIO``, which raises ``CheckpointLoadError`` naming the path and the cause.
    """
    if local_path is not None:
        try:
            checkpoint = torch.load(local_path, map_location="cpu", weights_only=weights_only, mmap=True)
        except Exception:  # torch's readers raise anything on bytes they cannot map: read it whole below
            checkpoint = None
        if isinstance(checkpoint, dict):
            return checkpoint
    return TorchCheckpointIO().load_checkpoint(path, map_location="cpu", weights_only=weights_only)


def _describe_sharded(path: str, weights_only: bool) -> dict[str, Any]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from torchplug.io.dcp_io import read_full, read_metadata

    metadata = read_metadata(path)
    entries = metadata.state_dict_metadata
    common = read_full(path, weights_only=weights_only, keep=lambda key: False, verify=False)  # verified before
    tensors: dict[str, Any] = {}
    keys = {k for k in common}
    for key, entry in entries.items():
        top = key.split(".", 1)[0]
        if key == COMMON_KEY or key.startswith(RANK_KEY_PREFIX):
            continue
        keys.add(top)
        if top == "state_dict" and isinstance(entry, TensorStorageMetadata):
            tensors[key[len("state_dict.") :]] = {"shape": list(entry.size), "dtype": _dtype(entry.properties.dtype)}
    optimizers = _sharded_optimizers(entries)
    processes = sum(1 for key in entries if key.startswith(RANK_KEY_PREFIX)) or None
    return _summary(
        path=path,
        kind=SHARDED,
        size=_size(path),
        processes=processes,
        checkpoint={**common, "optimizer_states": optimizers},
        tensors=tensors,
        keys=keys,
    )


def _sharded_optimizers(entries: dict[str, Any]) -> list[dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for key in entries:
        parts = key.split(".")
        if parts[0] != "optimizer_states" or len(parts) < 4 or not parts[1].isdigit():
            continue
        info = found.setdefault(int(parts[1]), {"state": set(), "param_groups": set()})
        if parts[2] == "state":
            info["state"].add(".".join(parts[3:-1]))
        elif parts[2] == "param_groups":
            info["param_groups"].add(parts[3])
    return [
        {"state": {name: {} for name in found[i]["state"]}, "param_groups": sorted(found[i]["param_groups"])}
        for i in sorted(found)
    ]


def _summary(
    path: str,
    kind: str,
    size: int | None,
    processes: int | None,
    checkpoint: dict[str, Any],
    tensors: dict[str, Any],
    keys: set[str] | None = None,
) -> dict[str, Any]:
    optimizers = checkpoint.get("optimizer_states") or []
    return {
        "path": path,
        "format": kind,
        "bytes": size,
        "processes": processes,
        "keys": sorted(keys if keys is not None else checkpoint),
        "epoch": checkpoint.get("epoch"),
        "global_step": checkpoint.get("global_step"),
        "torchplug_version": checkpoint.get("torchplug_version"),
        "format_version": checkpoint.get("format"),
        "lightning_version": checkpoint.get("pytorch-lightning_version"),
        "tensors": tensors,
        "parameters": sum(_numel(t["shape"]) for t in tensors.values()),
        "optimizers": [
            {"state_entries": len(o.get("state", {})), "param_groups": len(o.get("param_groups", []))}
            for o in optimizers
            if isinstance(o, dict)
        ],
        "lr_schedulers": len(checkpoint.get("lr_schedulers") or []),
        "callbacks": sorted(checkpoint.get("callbacks") or {}),
        "hyper_parameters": _plain(checkpoint.get("hyper_parameters") or {}),
    }


def _numel(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _plain(value: Any) -> Any:
    """JSON-ready: containers kept, anything else as its repr."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _size(path: str) -> int | None:
    try:
        fs, fs_path, _ = url_to_fs(path)
        return int(fs.du(fs_path, total=True)) if fs.isdir(fs_path) else int(fs.size(fs_path))
    except (OSError, NotImplementedError, ValueError):
        return None
