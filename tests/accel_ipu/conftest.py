"""Fixtures for accel-ipu's tests: poptorch faked at its import boundary, or really absent."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.accel_ipu.fake import use_fake, without_poptorch


@pytest.fixture
def fake_poptorch(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake poptorch on the path, on a machine with 4 IPUs; yields the fake ``poptorch`` module."""
    yield from use_fake(monkeypatch, ipus=4)


@pytest.fixture
def no_poptorch() -> Iterator[None]:
    """poptorch is not installed (the real state of this machine)."""
    yield from without_poptorch()


@pytest.fixture
def fake_state(fake_poptorch: ModuleType) -> ModuleType:
    """The fake's own state module (calls, compiled models, which one holds the IPUs)."""
    import poptorch._fake

    return poptorch._fake
