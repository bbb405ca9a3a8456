"""torch_xla._internal.tpu: TPU chips counted on the PCI bus (here: ``FAKE_XLA_CHIPS``), no runtime start."""

from __future__ import annotations

import os


def num_available_chips() -> int:
    return int(os.environ.get("FAKE_XLA_CHIPS", "1"))


def num_available_devices() -> int:
    return num_available_chips() * int(os.environ.get("FAKE_XLA_CORES_PER_CHIP", "1"))
