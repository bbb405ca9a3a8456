"""The ``acme`` accelerator: Acme NPUs through acme_runtime (``Trainer(accelerator="acme")``)."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from typing_extensions import override

from acme_torchplug import _vendor
from torchplug import Accelerator

__all__ = ["AcmeAccelerator"]


class AcmeAccelerator(Accelerator):
    """Train on Acme NPUs: one process per device, gloo between processes.

    ``devices=`` takes a number of devices (``2``), ``-1`` for all of them, or device ids
    (``[0, 1]``, ``"0,1"``). The simulated devices compute on the CPU, so torch sees one ``cpu``
    device per process, and each process tells the runtime its device by its local rank. (A real
    device registers its own torch device type, and ``torch.device("acme", id)`` carries the id.)
    """

    name: ClassVar[str] = "acme"
    #: Above the CPU (0) and GPUs (50): installed with its runtime, it is what ``"auto"`` picks.
    auto_priority: ClassVar[int] = 60
    device_type: ClassVar[str] = "cpu"
    autocast_device_type: ClassVar[str | None] = "cpu"
    process_group_backend: ClassVar[str] = "gloo"
    default_precision: ClassVar[str] = "32-true"
    #: The NPU computes in float32 and bfloat16; float16 and float64 are refused by name.
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "bf16-mixed", "bf16-true"})

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether acme_runtime is installed and finds a device. Never initialises a device."""
        return AcmeAccelerator.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why Acme training cannot run here: acme_runtime missing or broken, or no device."""
        missing = _vendor.probe()
        if missing is not None:
            return missing
        try:
            count = _vendor.device_count()
        except _vendor.AcmeRuntimeUnavailableError as exc:
            return str(exc)
        if count < 1:
            return "acme_runtime finds no Acme device (ACME_DEVICE_COUNT=0?). Hint: use accelerator='cpu'."
        return None

    @staticmethod
    @override
    def auto_device_count() -> int:
        """Every Acme device of this machine."""
        return _vendor.device_count()

    @staticmethod
    @override
    def parse_devices(devices: Any) -> list[int]:
        """The device ids ``devices=`` selects: a count N (the first N), ``-1`` (all), or a list of ids.

        Raises:
            TypeError: A bool, a float, None... (the value is quoted, with the choices).
            ValueError: A count or id this machine does not have, a repeated id, or junk.
        """
        count = AcmeAccelerator.auto_device_count()
        if isinstance(devices, bool) or not isinstance(devices, (int, str, Sequence)):
            raise TypeError(f"devices={devices!r} is not valid with accelerator='acme'. {_choices(count)}")
        if isinstance(devices, str):
            return _parse_text(devices, count)
        if isinstance(devices, int):
            return _first(devices, devices, count)
        return _ids(devices, [_id(devices, item, count) for item in devices], count)

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``cpu`` device per device id (the simulated NPUs compute on the CPU)."""
        return [torch.device("cpu") for _ in devices]

    # -- in each process ----------------------------------------------------------------------

    @override
    def setup_device(self, device: torch.device) -> None:
        """Select the device in acme_runtime (this initialises the runtime in this process).

        Raises:
            ValueError: ``device`` is not one of this accelerator's.
        """
        if device.type != self.device_type:
            raise ValueError(f"accelerator='acme' cannot run on {str(device)!r}: expected an Acme device.")
        _vendor.runtime().set_device(_local_device())

    @override
    def teardown(self) -> None:
        """Wait for the device's work to finish."""
        runtime = _vendor.runtime()
        if runtime.is_initialized():
            runtime.synchronize()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory of the device in bytes: used, peak and limit."""
        raw = _vendor.runtime().memory_stats(_local_device())
        return {
            "memory_used_bytes": int(raw["bytes_in_use"]),
            "memory_peak_bytes": int(raw["peak_bytes_in_use"]),
            "memory_limit_bytes": int(raw["bytes_limit"]),
        }

    @override
    def get_rng_state(self) -> dict[str, list[torch.Tensor]]:
        """The generator state of every device (byte tensors), for exact resumes."""
        runtime = _vendor.runtime()
        return {"acme": [runtime.get_rng_state(i).clone() for i in range(runtime.device_count())]}

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned, device by device."""
        if not isinstance(state, dict) or not isinstance(state.get("acme"), (list, tuple)):
            return
        runtime = _vendor.runtime()
        for index, device_state in enumerate(state["acme"][: runtime.device_count()]):
            runtime.set_rng_state(device_state, index)


def _local_device() -> int:
    """This process's Acme device: its local rank (set by the launcher; 0 in a single process)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


# -- parsing devices= ---------------------------------------------------------------------------


def _choices(count: int) -> str:
    return (
        f"Give a number of devices from 1 to {count} (devices=2), -1 for all of them, or device ids from "
        f"0 to {count - 1} (devices=[0, 1] or '0,1')."
    )


def _parse_text(devices: str, count: int) -> list[int]:
    text = devices.strip()
    if "," in text:
        items = [item.strip() for item in text.split(",") if item.strip()]
        return _ids(devices, [_id(devices, item, count) for item in items], count)
    if text.lstrip("-").isdigit():
        return _first(devices, int(text), count)
    raise ValueError(f"devices={devices!r} is not valid with accelerator='acme'. {_choices(count)}")


def _first(devices: Any, number: int, count: int) -> list[int]:
    if number == -1:
        return list(range(count))
    if not 1 <= number <= count:
        raise ValueError(f"devices={devices!r} asks for {number} device(s), but this machine has {count}.")
    return list(range(number))


def _id(devices: Any, item: Any, count: int) -> int:
    if isinstance(item, str) and item.strip().isdigit():
        return int(item)
    if not isinstance(item, (bool, str)):
        try:
            return operator.index(item)
        except TypeError:
            pass
    raise TypeError(f"devices={devices!r} holds {item!r}, which is not a device id. {_choices(count)}")


def _ids(devices: Any, ids: list[int], count: int) -> list[int]:
    if not ids:
        raise ValueError(f"devices={devices!r} lists no device id. {_choices(count)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"devices={devices!r} names a device twice; each device runs one process.")
    missing = [i for i in ids if not 0 <= i < count]
    if missing:
        raise ValueError(f"devices={devices!r} names device {missing[0]}, but this machine has {count}.")
    return ids
