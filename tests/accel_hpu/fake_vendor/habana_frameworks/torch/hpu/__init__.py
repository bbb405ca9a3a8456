"""habana_frameworks.torch.hpu: the HPUs of this machine (``FAKE_HPU_COUNT`` of ``FAKE_HPU_NAME``)."""

from __future__ import annotations

from typing import Any

import torch

from habana_frameworks.torch import _fake

_generator = torch.Generator().manual_seed(1234)


def device_count() -> int:
    return _fake.count()


def is_available() -> bool:
    return _fake.count() > 0


def get_device_name(device: Any = None) -> str:
    return _fake.device_name()


def current_device() -> int:
    return 0


def memory_stats(device: Any = None) -> dict[str, int]:
    gib = 1 << 30
    return {
        "Limit": 94 * gib,
        "InUse": 3 * gib,
        "MaxInUse": 5 * gib,
        "NumAllocs": 120,
        "NumFrees": 100,
        "ActiveAllocs": 20,
        "MaxAllocSize": gib,
        "TotalSystemAllocs": 7,
        "TotalSystemFrees": 2,
        "TotalActiveAllocs": 5,
    }


def get_rng_state(device: Any = "hpu") -> torch.Tensor:
    return _generator.get_state()


def set_rng_state(state: torch.Tensor, device: Any = "hpu") -> None:
    _generator.set_state(state)


def random_draw() -> float:
    """Not habana's: a draw from the fake HPU generator, for the tests of the random state."""
    return float(torch.rand(1, generator=_generator))


def synchronize() -> None:
    from habana_frameworks.torch import _fake

    _fake.synchronizations += 1
