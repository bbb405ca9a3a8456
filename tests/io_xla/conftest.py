"""Fixtures for io-xla's tests: the fake torch_xla shared with accel-tpu's tests, or none at all."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.accel_tpu.fake import use_fake, without_torch_xla
from tests.checkpoint_io_support import memory_root, root  # noqa: F401  (fixtures shared with tests/core/io)


@pytest.fixture
def fake_xla(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake torch_xla on the path; yields the fake ``torch_xla`` module."""
    yield from use_fake(monkeypatch)


@pytest.fixture
def no_xla() -> Iterator[None]:
    """torch_xla is not installed (the real state of this machine)."""
    yield from without_torch_xla()
