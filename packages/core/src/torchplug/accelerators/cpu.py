"""The CPU accelerator, always available."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch
from typing_extensions import override

from torchplug.accelerators.accelerator import Accelerator
from torchplug.utilities.devices import parse_device_ids

__all__ = ["CPUAccelerator"]


class CPUAccelerator(Accelerator):
    """Train on the CPU. ``devices=N`` runs N processes (useful with ``strategy="ddp"``)."""

    name: ClassVar[str] = "cpu"
    auto_priority: ClassVar[int] = 0
    device_type: ClassVar[str] = "cpu"
    autocast_device_type: ClassVar[str | None] = "cpu"
    process_group_backend: ClassVar[str] = "gloo"
    devices_are_processes: ClassVar[bool] = True

    @staticmethod
    @override
    def is_available() -> bool:
        """The CPU is always there."""
        return True

    @staticmethod
    @override
    def auto_device_count() -> int:
        """``devices="auto"`` on the CPU means one process."""
        return 1

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int:
        """Accept a positive int or a string of digits: the number of processes (any number: they share the CPU)."""
        return len(parse_device_ids(devices, None, "the CPU accelerator"))

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``cpu`` device per process."""
        return [torch.device("cpu")] * int(devices)

    @override
    def setup_device(self, device: torch.device) -> None:
        """Nothing to select on the CPU; checks that the device is a CPU."""
        if device.type != self.device_type:
            raise ValueError(f"The CPU accelerator cannot run on device {device}.")

    @override
    def teardown(self) -> None:
        """Nothing to release."""

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Load average and the process's resident memory, where the OS reports them."""
        stats: dict[str, Any] = {}
        if hasattr(os, "getloadavg"):
            stats["cpu_load_1m"] = os.getloadavg()[0]
        try:
            with open("/proc/self/statm") as statm:
                stats["rss_bytes"] = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
        return stats
