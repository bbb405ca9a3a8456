"""Fixtures for accel-cuda's tests: GPUs faked at torch.cuda's boundary, and a clean CUDA environment.

The fakes replace what torch.cuda reports (device counts, names, memory), never torchplug_cuda's
own functions, so the code under test runs exactly as it would on a machine with those GPUs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from torchplug_cuda import _usable as usable

FakeGPUs = Callable[[int], None]


@pytest.fixture(autouse=True)
def clean_cuda_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CUDA_VISIBLE_DEVICES and no remembered usable GPUs from the machine or another test."""
    for name in ("CUDA_VISIBLE_DEVICES", usable.REUSE_ENV):
        monkeypatch.setenv(name, "")  # recorded, so that a value set during the test is removed afterwards
        monkeypatch.delenv(name)


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> FakeGPUs:
    """Make torch.cuda report ``count`` GPUs (``fake_gpus(2)``); torch reports what a CUDA build would."""

    def install(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)

    return install
