"""Statistics of one GPU for monitoring: memory from PyTorch's allocator and the driver, and NVML's gauges."""

from __future__ import annotations

from typing import Any, Final

import torch

__all__ = ["cuda_device_stats"]

#: NVML gauges read through ``torch.cuda`` where ``nvidia-ml-py`` is installed (``pip install accel-cuda[nvml]``).
_NVML_GAUGES: Final = {
    "utilization_percent": "utilization",
    "temperature_celsius": "temperature",
    "power_draw_milliwatts": "power_draw",
}


def cuda_device_stats(device: torch.device | int) -> dict[str, Any]:
    """Memory of ``device`` in bytes, allocator counters, and NVML's gauges where available.

    Keys: ``memory_allocated_bytes`` (held by tensors), ``memory_reserved_bytes`` (held by the
    caching allocator), their peaks ``memory_peak_allocated_bytes`` and
    ``memory_peak_reserved_bytes``, ``memory_free_bytes`` and ``memory_total_bytes`` (the driver's
    view, all processes included), ``alloc_retries`` (allocations that had to free the cache first:
    a sign of fragmentation) and ``ooms``; then ``utilization_percent``, ``temperature_celsius``
    and ``power_draw_milliwatts`` when NVML answers.
    """
    counters = torch.cuda.memory_stats(device)
    free, total = torch.cuda.mem_get_info(device)
    stats: dict[str, Any] = {
        "memory_allocated_bytes": torch.cuda.memory_allocated(device),
        "memory_reserved_bytes": torch.cuda.memory_reserved(device),
        "memory_peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "memory_peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
        "memory_free_bytes": free,
        "memory_total_bytes": total,
        "alloc_retries": counters.get("num_alloc_retries", 0),
        "ooms": counters.get("num_ooms", 0),
    }
    stats.update(_nvml_gauges(torch.device("cuda", device) if isinstance(device, int) else device))
    return stats


def _nvml_gauges(device: torch.device) -> dict[str, int]:
    gauges: dict[str, int] = {}
    for key, function in _NVML_GAUGES.items():
        try:
            gauges[key] = int(getattr(torch.cuda, function)(device))
        except ModuleNotFoundError:  # nvidia-ml-py is not installed: no gauge can be read
            return gauges
        except Exception:  # NVML answers per gauge: a board without a sensor raises NVMLError_NotSupported
            continue
    return gauges
