"""What the checkpoint IO test suites share: real filesystem roots, comparison of loaded checkpoints.

Used by ``tests/core/io`` (TorchCheckpointIO) and ``tests/io_xla`` (XLACheckpointIO), which import the
fixtures into their modules.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
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
