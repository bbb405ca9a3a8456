"""The fake torch_xla (``fake_vendor/torch_xla``): putting it on the path, and forgetting it afterwards.

Shared by the accel-tpu and io-xla tests. The fake stands in for the vendor library at its import
boundary only; our own packages run unchanged against it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

FAKE_VENDOR = Path(__file__).parent / "fake_vendor"

#: The reason every TPU plugin gives when torch_xla is missing (checked word for word).
NOT_INSTALLED = (
    "torch_xla is not installed. Hint: pip install torch_xla "
    "(see https://github.com/pytorch/xla for the build matching your torch)"
)


def forget_torch_xla() -> None:
    """Drop every ``torch_xla`` module, so the next import starts from a fresh (fake) runtime."""
    for name in [n for n in sys.modules if n == "torch_xla" or n.startswith("torch_xla.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def use_fake(monkeypatch: pytest.MonkeyPatch, chips: int = 1) -> Iterator[ModuleType]:
    """Put the fake on ``sys.path`` with ``chips`` TPU chips (``PJRT_DEVICE=TPU``), and forget it afterwards."""
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("FAKE_XLA_CHIPS", str(chips))
    for name in ("FAKE_XLA_CORES_PER_CHIP", "FAKE_XLA_ORDINAL", "FAKE_XLA_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    forget_torch_xla()
    monkeypatch.syspath_prepend(str(FAKE_VENDOR))
    yield importlib.import_module("torch_xla")
    forget_torch_xla()


def without_torch_xla() -> Iterator[None]:
    """The real situation on this machine: torch_xla is not installed (skips where it is)."""
    forget_torch_xla()
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here: the missing-library behaviour cannot be observed")
    yield
    forget_torch_xla()


def subprocess_env(fake: bool, **extra: str) -> dict[str, str]:
    """An environment for a child Python: the repository (and the fake, if asked) on PYTHONPATH."""
    root = Path(__file__).parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_XLA_", "TORCHPLUG_BLOCK", "PJRT_"))}
    paths = [str(FAKE_VENDOR)] if fake else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(root)])
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if fake:
        env.update(PJRT_DEVICE="TPU", FAKE_XLA_CHIPS="1")
    env.update(extra)
    return env
