"""The fake's own state (not part of torch_xla's API): which process this is, and what was called.

The tests read and set it; it is reset whenever the tests forget the ``torch_xla`` modules.
"""

from __future__ import annotations

import os

import torch

#: Every fake XLA device is the CPU.
DEVICE = torch.device("cpu")

#: Whether this process "started the XLA runtime" (asked for a device, a rank or a count).
started = False

#: How many times the lazy graph was cut (``torch_xla.sync``/``xm.mark_step``).
syncs = 0
#: How many times ``xm.wait_device_ops`` ran.
waits = 0

#: Names of the fake functions called, in order (only those the tests look at).
calls: list[str] = []

rng_seed = 101


def start() -> None:
    """Mark the runtime started, as the real first device/rank query does."""
    global started
    started = True


def record(name: str) -> None:
    calls.append(name)


def world_size() -> int:
    return int(os.environ.get("FAKE_XLA_WORLD_SIZE", "1"))


def ordinal() -> int:
    return int(os.environ.get("FAKE_XLA_ORDINAL", "0"))
