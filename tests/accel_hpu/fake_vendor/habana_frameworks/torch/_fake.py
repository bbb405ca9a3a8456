"""The fake's own state (not part of habana_frameworks' API), and what makes ``hpu`` mean the CPU.

Real habana_frameworks teaches torch the ``hpu`` device when imported. The fake does the same
for the CPU: a ``TorchFunctionMode`` rewrites every ``hpu`` device given to a torch function
(``tensor.to("hpu")``, ``torch.zeros(..., device="hpu")``, ``module.to(torch.device("hpu"))``) to
``cpu``. The mode is installed once per process (thread-local, as torch's modes are); the tests
remove it when they forget the fake.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: How many times ``mark_step`` ran.
mark_steps = 0
#: How many times ``hpu.synchronize`` ran.
synchronizations = 0

#: How many forward passes ran inside ``fp8_autocast`` (through the fake engine's ``Linear``).
fp8_forwards = 0

#: The recipes ``fp8_autocast`` was entered with, in order.
fp8_recipes: list[Any] = []

#: Whether an ``fp8_autocast`` region is open.
fp8_enabled = False


def count() -> int:
    return int(os.environ.get("FAKE_HPU_COUNT", "8"))


def device_name() -> str:
    return os.environ.get("FAKE_HPU_NAME", "GAUDI2")


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.device) and value.type == "hpu":
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == "hpu":
        return "cpu"
    return value


class HPUOnCPU(TorchFunctionMode):
    """Every ``hpu`` device given to a torch function means the CPU."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.device:  # torch.device("hpu") stays an HPU device: only its use means the CPU
            return func(*args, **(kwargs or {}))
        return func(*(_cpu(a) for a in args), **{k: _cpu(v) for k, v in (kwargs or {}).items()})


_mode: HPUOnCPU | None = None


def install() -> None:
    global _mode
    if _mode is None:
        _mode = HPUOnCPU()
        _mode.__enter__()


def uninstall() -> None:
    """Remove the device mode (the tests call this when they forget the fake)."""
    global _mode
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
