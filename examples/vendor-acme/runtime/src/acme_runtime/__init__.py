"""acme_runtime: the (simulated) runtime library of the fictional Acme NPU.

It behaves as a vendor library does: installed separately (``pip install acme-runtime``), it counts
its devices without initialising them, initialises on first use, and keeps one random generator
per device. Its "devices" compute on the CPU. ``ACME_DEVICE_COUNT`` sets how many it finds
(default 2).
"""

from __future__ import annotations

import os

import torch

__all__ = [
    "device_count",
    "get_rng_state",
    "is_initialized",
    "manual_seed",
    "memory_stats",
    "set_device",
    "set_rng_state",
    "synchronize",
]

__version__ = "1.0.0"

_generators: dict[int, torch.Generator] = {}
_current: int | None = None


def device_count() -> int:
    """How many Acme devices this machine has (read without initialising anything)."""
    return int(os.environ.get("ACME_DEVICE_COUNT", "2"))


def is_initialized() -> bool:
    """Whether a device was selected in this process."""
    return _current is not None


def _check(index: int) -> int:
    if not 0 <= index < device_count():
        raise RuntimeError(f"acme_runtime: no device {index} (this machine has {device_count()})")
    return index


def set_device(index: int) -> None:
    """Select device ``index`` for this process (initialises the runtime)."""
    global _current
    _current = _check(index)


def synchronize() -> None:
    """Wait for the selected device's work (the simulation computes synchronously)."""


def memory_stats(index: int) -> dict[str, int]:
    """The device's memory, in bytes."""
    _check(index)
    return {"bytes_in_use": 0, "peak_bytes_in_use": 0, "bytes_limit": 16 * 2**30}


def _generator(index: int) -> torch.Generator:
    return _generators.setdefault(_check(index), torch.Generator().manual_seed(index))


def manual_seed(seed: int) -> None:
    """Seed every device's generator."""
    for index in range(device_count()):
        _generator(index).manual_seed(seed + index)


def get_rng_state(index: int) -> torch.Tensor:
    """The state of device ``index``'s generator (a byte tensor)."""
    return _generator(index).get_state()


def set_rng_state(state: torch.Tensor, index: int) -> None:
    """Restore what :func:`get_rng_state` returned."""
    _generator(index).set_state(state)
