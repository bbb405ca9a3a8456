"""The ``tpu`` accelerator (alias ``xla``): TPUs, and other XLA devices, through torch_xla."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from typing_extensions import override

from torchplug import Accelerator
from torchplug_tpu import _vendor
from torchplug_tpu.precision import XLA_PRECISIONS, xla_precision_name

__all__ = ["XLAAccelerator"]


class XLAAccelerator(Accelerator):
    """Train on TPUs through torch_xla (imported the first time the accelerator is used).

    ``devices=`` takes ``1``, all the devices of the host (their number,
    ``-1`` or ``"auto"``), or one device by index (``[i]`` or ``"i,"``). One device trains in this
    process (``strategy="single_xla"``); all of them start one process each (``strategy="xla"``).

    The user's precision names map to this package's XLA precisions (``"bf16-true"`` to
    ``"xla-bf16-true"``...); ``16-mixed`` and ``64-true`` are refused. Checkpoints go through
    io-xla's ``xla`` checkpoint IO when it is installed (tensors moved to the CPU, written
    atomically), and through the core's ``torch`` IO otherwise.
    """

    name: ClassVar[str] = "tpu"
    auto_priority: ClassVar[int] = 100
    device_type: ClassVar[str] = "xla"
    #: ``torch.autocast("xla")`` works under torch_xla; ``bf16-mixed`` itself maps to ``xla-bf16-mixed``.
    autocast_device_type: ClassVar[str | None] = "xla"
    process_group_backend: ClassVar[str] = "xla"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(XLA_PRECISIONS.values())
    single_device_strategy: ClassVar[str] = "single_xla"
    parallel_strategy: ClassVar[str] = "xla"

    #: io-xla's checkpoint IO; when io-xla is not installed the core falls back to its own ``torch`` IO.
    default_checkpoint_io: ClassVar[str | None] = "xla"

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether torch_xla is installed and sees at least one device (the runtime is not started)."""
        return XLAAccelerator.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why TPU training cannot run here: torch_xla missing or broken, or no device."""
        missing = _vendor.probe()
        if missing is not None:
            return missing
        try:
            count = _vendor.local_device_count()
        except _vendor.TorchXLAUnavailableError as exc:
            return str(exc)
        except Exception as exc:  # torch_xla raises many kinds of errors on machines it cannot use
            return f"torch_xla could not count the XLA devices: {type(exc).__name__}: {exc}"
        if count < 1:
            return (
                f"torch_xla found no XLA device on this machine (PJRT_DEVICE={os.environ.get('PJRT_DEVICE')!r}). "
                "Hint: run on a TPU VM, or set PJRT_DEVICE=CPU to try XLA on the CPU."
            )
        return None

    @staticmethod
    @override
    def auto_device_count() -> int:
        """All the XLA devices of this host (counted without starting the XLA runtime on TPUs)."""
        return _vendor.local_device_count()

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int | list[int]:
        """Accept 1, all devices (their number or -1), or one device index as ``[i]`` or ``"i,"``."""
        return _parse(devices, XLAAccelerator.auto_device_count())

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``xla:0`` ... ``xla:n-1`` for a count, ``xla:i`` for ``[i]`` (one entry per process)."""
        if isinstance(devices, list):
            return [torch.device("xla", devices[0])]
        return [torch.device("xla", index) for index in range(int(devices))]

    @override
    def setup_device(self, device: torch.device) -> None:
        """Nothing to select: the XLA runtime gives each process its device."""

    @override
    def teardown(self) -> None:
        """Nothing to release."""

    @override
    def synchronize(self, device: torch.device) -> None:
        """Run the lazy graph recorded so far and wait for the device (``xm.wait_device_ops``).

        XLA records operations and runs them later: without this, a timing (``ThroughputMonitor``)
        would measure the recording, not the computation.
        """
        _vendor.sync()
        _vendor.xla_model().wait_device_ops()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Device memory in bytes, from ``xm.get_memory_info``: used, limit and (where reported) peak."""
        info = dict(_vendor.xla_model().get_memory_info(device))
        if "bytes_used" in info:  # torch_xla >= 2.1
            stats = {"memory_used_bytes": int(info["bytes_used"]), "memory_limit_bytes": int(info["bytes_limit"])}
            if "peak_bytes_used" in info:
                stats["memory_peak_bytes"] = int(info["peak_bytes_used"])
            return stats
        total, free = int(info["kb_total"]) * 1024, int(info["kb_free"]) * 1024  # older torch_xla
        return {"memory_used_bytes": total - free, "memory_limit_bytes": total}

    @override
    def get_rng_state(self) -> Any:
        """The seed of this process's XLA generator (an int)."""
        return int(_vendor.xla_model().get_rng_state())

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned."""
        if state is not None:
            _vendor.xla_model().set_rng_state(int(state))

    # -- decisions the core delegates ---------------------------------------------------------

    @override
    def precision_for(self, precision: str) -> str:
        """The XLA precision for the user's name: ``"bf16-true"`` -> ``"xla-bf16-true"``; others are refused."""
        return xla_precision_name(precision)


def _parse(devices: Any, count: int) -> int | list[int]:
    """``devices`` as a count (1 or ``count``) or a one-element list of a device index."""
    if isinstance(devices, bool) or not isinstance(devices, (int, str, Sequence)):
        raise TypeError(f"devices={devices!r} is not valid with accelerator='tpu': {_choices(count)}")
    value: Any = devices
    if isinstance(devices, str):
        text = devices.strip()
        value = int(text) if text.lstrip("-").isdigit() else _index_list(text, devices, count)
    if isinstance(value, int):
        if value == -1 or (value == count and count > 0):
            return count
        if value == 1 and count > 0:
            return 1
        raise ValueError(f"devices={devices!r} is not valid with accelerator='tpu': {_choices(count)}")
    indices = list(value)
    if len(indices) != 1 or isinstance(indices[0], bool) or not isinstance(indices[0], int):
        raise ValueError(f"devices={devices!r} is not valid with accelerator='tpu': {_choices(count)}")
    if not 0 <= indices[0] < count:
        raise ValueError(
            f"devices={devices!r} selects XLA device {indices[0]}, but this host has {count} "
            f"(ids 0 to {count - 1}). {_choices(count)}"
        )
    return indices


def _index_list(text: str, devices: str, count: int) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError(f"devices={devices!r} is not valid with accelerator='tpu': {_choices(count)}")
    return [int(part) for part in parts]


def _choices(count: int) -> str:
    if count < 1:
        return "torch_xla sees no XLA device on this host."
    return (
        f"XLA trains on one device or on all {count} devices of this host: give devices=1, "
        f"devices={count} (or -1, 'auto') for all, or devices=[i] for device i (0 to {count - 1})."
    )
