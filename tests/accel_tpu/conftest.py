"""Fixtures for accel-tpu's tests: torch_xla faked at its import boundary, or really absent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

from tests.accel_tpu.fake import use_fake, without_torch_xla


@pytest.fixture
def fake_xla(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake torch_xla on the path, with one TPU chip; yields the fake ``torch_xla`` module."""
    yield from use_fake(monkeypatch, chips=1)


@pytest.fixture
def fake_chips(fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Set how many TPU chips the fake torch_xla finds on the PCI bus."""
    return lambda chips: monkeypatch.setenv("FAKE_XLA_CHIPS", str(chips))


@pytest.fixture
def no_xla() -> Iterator[None]:
    """torch_xla is not installed (the real state of this machine)."""
    yield from without_torch_xla()


@pytest.fixture
def fake_state(fake_xla: ModuleType) -> ModuleType:
    """The fake's own state module (calls, syncs, whether the runtime started)."""
    import torch_xla._fake

    return torch_xla._fake
