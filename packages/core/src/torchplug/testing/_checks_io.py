"""Checkpoint IO checks: round trips, fsspec URLs, missing files, removal, atomic writes and options."""

from __future__ import annotations

import uuid
from typing import Any, Final

from torchplug.testing._check import CheckFailed, check
from torchplug.testing._context import Context

#: A storage option no checkpoint IO supports.
BOGUS_OPTION: Final = {"torchplug_conformance_unknown_option": True}


class Unpicklable:
    """Fails to pickle, half-way through a save: stands in for a crash while writing."""

    def __reduce__(self) -> Any:
        raise RuntimeError("torchplug conformance: this object refuses to be saved (a simulated failure)")


def _io(context: Context) -> Any:
    context.subject.require_available()
    return context.subject.create()


def _checkpoint() -> dict[str, Any]:
    import torch

    return {
        "state_dict": {
            "weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
            "half": torch.ones(3, dtype=torch.bfloat16),
            "step": torch.tensor(7, dtype=torch.int64),
        },
        "epoch": 3,
        "name": "conformance",
        "nested": [{"lr": 0.1}, (1, 2), None, True],
    }


def _equal(left: Any, right: Any) -> bool:
    import torch

    if isinstance(left, torch.Tensor):
        return isinstance(right, torch.Tensor) and left.dtype == right.dtype and torch.equal(left.cpu(), right.cpu())
    if isinstance(left, dict):
        return isinstance(right, dict) and left.keys() == right.keys() and all(_equal(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return isinstance(right, (list, tuple)) and len(left) == len(right) and all(map(_equal, left, right))
    return bool(left == right)


def _save(io: Any, checkpoint: dict[str, Any], path: str, **kwargs: Any) -> None:
    io.save_checkpoint(checkpoint, path, **kwargs)
    io.flush()  # asynchronous IO writes in the background: the file exists once flush() returns


@check(
    "checkpoint_io",
    "save_load",
    summary="a checkpoint of tensors (float32, bfloat16, int64) and plain data loads back equal with weights_only=True",
    fix="write with torch.save (or an equivalent) and read with torch.load(weights_only=weights_only, "
    "map_location=map_location), keeping dtypes and containers",
)
def save_load(context: Context) -> str:
    io = _io(context)
    path = str(context.workdir / "a" / "b" / "checkpoint.ckpt")  # parent directories do not exist yet
    _save(io, _checkpoint(), path)
    if not io.exists(path):
        raise CheckFailed(f"after save_checkpoint(..., {path!r}) and flush(), exists() says False")
    loaded = io.load_checkpoint(path, map_location="cpu")
    if not _equal(_checkpoint(), loaded):
        raise CheckFailed(f"load_checkpoint() returned {loaded!r}, not what was saved")
    io.teardown()
    return "saved into new directories, loaded back equal"


@check(
    "checkpoint_io",
    "fsspec_url",
    summary="paths are fsspec URLs: save, exists, load and remove work on memory://",
    fix="open files through fsspec (fsspec.core.url_to_fs(path)) rather than the local filesystem only",
)
def fsspec_url(context: Context) -> str:
    io = _io(context)
    url = f"memory://torchplug-conformance-{uuid.uuid4().hex}/run/last.ckpt"
    try:
        _save(io, _checkpoint(), url)
        if not io.exists(url):
            raise CheckFailed(f"after saving to {url}, exists() says False: was it written to a local path instead?")
        if not _equal(_checkpoint(), io.load_checkpoint(url, map_location="cpu")):
            raise CheckFailed(f"the checkpoint saved to {url} does not load back equal")
        io.remove_checkpoint(url)
        if io.exists(url):
            raise CheckFailed(f"remove_checkpoint({url!r}) left it in place")
    finally:
        io.teardown()
    return "memory:// round trip and removal"


@check(
    "checkpoint_io",
    "missing_file",
    summary="loading a path where nothing is raises FileNotFoundError naming the path",
    fix="let the filesystem's FileNotFoundError through, or raise FileNotFoundError(f'no checkpoint at {path!r}')",
)
def missing_file(context: Context) -> str:
    io = _io(context)
    path = str(context.workdir / "missing.ckpt")
    try:
        io.load_checkpoint(path)
    except FileNotFoundError as exc:
        if "missing.ckpt" not in str(exc):
            raise CheckFailed(f"FileNotFoundError({exc}) does not name the path {path!r}") from exc
        return "FileNotFoundError naming the path"
    raise CheckFailed(f"load_checkpoint({path!r}) returned, although nothing is there")


@check(
    "checkpoint_io",
    "remove",
    summary="remove_checkpoint() deletes the file, and removing it again is not an error",
    fix="delete through fsspec and ignore a path that is already gone",
)
def remove(context: Context) -> str:
    io = _io(context)
    path = str(context.workdir / "old.ckpt")
    _save(io, _checkpoint(), path)
    io.remove_checkpoint(path)
    if io.exists(path):
        raise CheckFailed(f"remove_checkpoint({path!r}) left it in place")
    io.remove_checkpoint(path)
    io.teardown()
    return "removed; a second removal is a no-op"


@check(
    "checkpoint_io",
    "atomic_save",
    summary="a save that fails half-way raises, leaves the earlier checkpoint intact, and no file under a new name",
    fix="write to a temporary file beside the target and rename it over the target only once it is complete; "
    "remove the temporary file when the write fails, and let the error through",
)
def atomic_save(context: Context) -> str:
    io = _io(context)
    path = str(context.workdir / "last.ckpt")
    _save(io, _checkpoint(), path)
    broken = {**_checkpoint(), "epoch": 4, "extra": Unpicklable()}
    for target in (path, str(context.workdir / "new.ckpt")):
        try:
            _save(io, broken, target)
        except Exception:  # the save must fail: any error type will do
            pass
        else:
            raise CheckFailed(
                f"saving an object that cannot be pickled to {target!r} raised nothing (from save_checkpoint() or "
                "flush()): a failed save must not pass silently"
            )
    if io.exists(str(context.workdir / "new.ckpt")):
        raise CheckFailed("a save that failed left a file under its final name 'new.ckpt'")
    loaded = io.load_checkpoint(path, map_location="cpu")
    if not _equal(_checkpoint(), loaded):
        raise CheckFailed("a save that failed over an earlier checkpoint damaged it: it no longer loads as written")
    io.teardown()
    return "the failed save raised; the earlier checkpoint is intact"


@check(
    "checkpoint_io",
    "storage_options",
    summary="an unsupported storage option raises TypeError instead of being ignored",
    fix="raise TypeError(f'storage_options={storage_options!r} is not supported ...') for options you do not use",
)
def storage_options(context: Context) -> str:
    io = _io(context)
    path = str(context.workdir / "options.ckpt")
    try:
        _save(io, _checkpoint(), path, storage_options=BOGUS_OPTION)
    except TypeError as exc:
        return f"TypeError: {exc}"
    finally:
        try:
            io.teardown()
        except TypeError:  # an asynchronous IO may report the refused save once more
            pass
    raise CheckFailed(f"storage_options={BOGUS_OPTION!r} was accepted silently")


@check(
    "checkpoint_io",
    "flush_teardown",
    summary="flush() and teardown() may be called repeatedly, before and after saves",
    fix="make flush() wait for pending saves (a no-op when there is none) and teardown() idempotent",
)
def flush_teardown(context: Context) -> str:
    io = _io(context)
    io.flush()
    path = str(context.workdir / "flushed.ckpt")
    io.save_checkpoint(_checkpoint(), path)
    io.flush()
    io.flush()
    if not io.exists(path):
        raise CheckFailed("after flush(), the saved checkpoint does not exist")
    io.teardown()
    io.teardown()
    return "flush() and teardown() are idempotent"
