"""The Accelerator base class: the defaults a new device plugin inherits."""

from __future__ import annotations

import os

import pytest

from torchplug.accelerators.cpu import CPUAccelerator


def test_deterministic_setup_changes_nothing_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = dict(os.environ)
    CPUAccelerator().deterministic_setup()
    assert dict(os.environ) == before
