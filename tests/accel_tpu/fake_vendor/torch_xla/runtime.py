"""torch_xla.runtime: ranks, world size and device counts."""

from __future__ import annotations

import os

from torch_xla import _fake
from torch_xla._internal import tpu


def device_type() -> str | None:
    value = os.environ.get("PJRT_DEVICE")
    return value.split("_")[0] if value else value


def world_size() -> int:
    _fake.start()
    return _fake.world_size()


def global_ordinal() -> int:
    _fake.start()
    return _fake.ordinal()


def local_ordinal() -> int:
    _fake.start()
    return _fake.ordinal()


def host_index() -> int:
    return 0


def addressable_runtime_device_count() -> int:
    _fake.start()
    return tpu.num_available_devices()


def global_runtime_device_count() -> int:
    _fake.start()
    return tpu.num_available_devices()
