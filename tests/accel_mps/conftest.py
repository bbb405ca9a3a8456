"""Fixtures for accel-mps's tests: torch's MPS boundary faked on this Linux machine, or left as it really is.

No Mac runs these tests, so a Mac is faked at the one boundary the package reads: the operating
system's name (``sys.platform``), ``torch.backends.mps`` (is it built, is it available, which
macOS) and ``torch.mps`` (memory, random state, cache). Nothing of torchplug is faked, and no
tensor goes to the device (there is none).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pytest
import torch


@dataclass
class FakeMac:
    """What the fake Mac reports, and what was asked of it."""

    macos: tuple[int, int] = (14, 5)
    built: bool = True
    available: bool = True
    allocated: int = 1 << 20
    driver: int = 3 << 20
    recommended: int = 16 << 30
    rng_state: torch.Tensor = field(default_factory=lambda: torch.arange(8, dtype=torch.uint8))
    calls: list[str] = field(default_factory=list)

    def is_macos_or_newer(self, major: int, minor: int) -> bool:
        return self.macos >= (major, minor)

    def set_rng_state(self, new_state: torch.Tensor, device: object = "mps") -> None:
        self.calls.append("set_rng_state")
        self.rng_state = new_state.clone()


@pytest.fixture
def fake_mac(monkeypatch: pytest.MonkeyPatch) -> FakeMac:
    """This process looks like a Mac with MPS (macOS 14.5, Apple silicon)."""
    mac = FakeMac()
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: mac.built)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mac.available)
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", mac.is_macos_or_newer)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: mac.allocated)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: mac.driver)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: mac.recommended)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda device="mps": mac.rng_state.clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", mac.set_rng_state)
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: mac.calls.append("empty_cache"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: mac.calls.append("synchronize"))
    return mac
