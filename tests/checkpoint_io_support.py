"""What the checkpoint IO test suites share: real filesystem roots, comparison of loaded checkpoints,
and a save loop killed with SIGKILL in the middle of a write.

Used by ``tests/core/io`` (TorchCheckpointIO) and ``tests/io_xla`` (XLACheckpointIO), which import the
fixtures into their modules.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch


class Unpicklable:
    """Makes ``torch.save`` fail after it has started writing."""

    def __reduce__(self) -> Any:
        raise RuntimeError("this object refuses to be pickled")


def assert_same(loaded: Any, expected: Any) -> None:
    """Equal structure, types of containers, and values; tensors compared on the CPU."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(loaded, torch.Tensor) and torch.equal(loaded.cpu(), expected)
    elif isinstance(expected, dict):
        assert isinstance(loaded, dict) and loaded.keys() == expected.keys()
        for key in expected:
            assert_same(loaded[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert type(loaded) is type(expected) and len(loaded) == len(expected)
        for a, b in zip(loaded, expected):
            assert_same(a, b)
    else:
        assert loaded == expected


@pytest.fixture
def memory_root() -> Iterator[str]:
    """A fresh directory on fsspec's memory filesystem, removed afterwards."""
    root = f"/torchplug-test-{uuid.uuid4().hex[:8]}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(params=["local", "memory", "file-url"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A directory URL on each real filesystem: the local disk, fsspec's memory, and ``file://`` URLs."""
    if request.param == "local":
        return str(tmp_path)
    if request.param == "file-url":
        return tmp_path.as_uri()
    return str(request.getfixturevalue("memory_root"))


def listing(root: str) -> list[str]:
    """The names of the files in the directory ``root`` (any fsspec URL), sorted."""
    fs, path = fsspec.core.url_to_fs(root)
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))


# -- a real SIGKILL in the middle of a save -------------------------------------------------------

_SAVE_LOOP = """
import sys, torch
{imports}

path = sys.argv[1]
io = {io}
for step in range(1, 10_000):
    # 3 x 48 MB, every element equal to the step: a torn file would mix values or be cut short
    checkpoint = {{"step": step, "weights": [torch.full((12_000_000,), float(step)) for _ in range(3)]}}
    io.save_checkpoint(checkpoint, path)
    print(step, flush=True)
"""


def _temporary_bytes(directory: Path) -> int:
    total = 0
    for p in directory.iterdir():
        if p.name.startswith(".last.ckpt.tmp-"):
            try:
                total += p.stat().st_size
            except FileNotFoundError:  # renamed meanwhile
                pass
    return total


def kill_while_writing(
    tmp_path: Path, kill_after_bytes: int, *, imports: str, io: str, env: Mapping[str, str] | None = None
) -> tuple[int, int, list[Path]]:
    """Save 144 MB checkpoints to ``<tmp_path>/ckpt/last.ckpt`` in a loop, in a child; SIGKILL it mid-write.

    The child runs ``imports`` (source lines), then saves with the IO that the expression ``io``
    builds. It is killed once a later save's temporary file holds ``kill_after_bytes``.

    Returns:
        The last step the child reported complete, the size of the final file, and the other files.
    """
    script = tmp_path / "save_loop.py"
    script.write_text(_SAVE_LOOP.format(imports=textwrap.dedent(imports).strip(), io=io))
    target = tmp_path / "ckpt" / "last.ckpt"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(target)],
        stdout=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # one save is complete: from now on the file must always load
        assert first.strip() == "1", first
        deadline = time.monotonic() + 60
        while _temporary_bytes(target.parent) < kill_after_bytes:  # a later save is writing its temporary file
            assert time.monotonic() < deadline, "the next save never started writing"
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        rest = proc.communicate(timeout=30)[0]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    last_printed = int([first, *rest.split()][-1])
    return last_printed, target.stat().st_size, [p for p in target.parent.iterdir() if p.name != "last.ckpt"]


def assert_last_complete(loaded: dict[str, Any], last_printed: int, size: int, leftovers: list[Path]) -> None:
    """``loaded`` is a whole checkpoint of the loop, and only a hidden temporary file may be left beside it."""
    # a save is complete when it returns; the killed one may have renamed its file just before printing
    assert loaded["step"] in (last_printed, last_printed + 1)
    assert len(loaded["weights"]) == 3
    for weights in loaded["weights"]:
        assert weights.numel() == 12_000_000 and bool((weights == float(loaded["step"])).all())
    # the half-written temporary file was hidden, never under the final name; loading removed it (its writer is dead)
    assert all(p.name.startswith(".last.ckpt.tmp-") for p in leftovers)
    assert not [p for p in leftovers if p.exists()], "the load should have removed the dead writer's temporary file"
