"""Fixtures for accel-hpu's tests: habana_frameworks faked at its import boundary, or really absent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

from tests.accel_hpu.fake import forget_habana, use_fake, without_habana


@pytest.fixture
def fake_habana(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake habana_frameworks on the path, with 8 Gaudi2 HPUs; yields ``habana_frameworks.torch``."""
    yield from use_fake(monkeypatch, hpus=8)


@pytest.fixture
def no_habana() -> Iterator[None]:
    """habana_frameworks is not installed (the real state of this machine)."""
    yield from without_habana()


@pytest.fixture
def fake_state(fake_habana: ModuleType) -> ModuleType:
    """The fake's own state module (mark_step and fp8 counters)."""
    import habana_frameworks.torch._fake

    return habana_frameworks.torch._fake


@pytest.fixture
def refake(fake_habana: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Reload the fake with other settings: ``refake(FAKE_HPU_NAME="GAUDI")``, ``refake(FAKE_HABANA_NO_FP8="1")``."""

    def apply(**settings: str) -> None:
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        forget_habana()
        import habana_frameworks.torch  # noqa: F401 - re-installs the device mode

    return apply
