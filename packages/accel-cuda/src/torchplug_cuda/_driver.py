"""The NVIDIA driver's own versions, read from ``/proc`` or NVML through ctypes (no torch, no pynvml)."""

from __future__ import annotations

import ctypes
import re
import sys
from typing import Final

from torchplug_cuda import _probe

__all__ = ["driver_versions"]

_MODULE_VERSION: Final = re.compile(r"Kernel Module(?: for \S+)?\s+(\d[\w.]*)")
_NVML_LIBRARY: Final = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"


def driver_versions() -> dict[str, str | None]:
    """``{"driver": "550.54.15", "driver_cuda": "12.4"}``: the driver, and the newest CUDA it supports.

    Either value is None when it cannot be read (no driver, no NVML).
    """
    versions: dict[str, str | None] = {"driver": _driver_from_proc(), "driver_cuda": None}
    nvml = _load_nvml()
    if nvml is None or nvml.nvmlInit_v2() != 0:
        return versions
    try:
        buffer = ctypes.create_string_buffer(96)
        if versions["driver"] is None and nvml.nvmlSystemGetDriverVersion(buffer, len(buffer)) == 0:
            versions["driver"] = buffer.value.decode(errors="replace")
        cuda = ctypes.c_int()
        if nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) == 0:
            versions["driver_cuda"] = f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
    finally:
        nvml.nvmlShutdown()
    return versions


def _driver_from_proc() -> str | None:
    try:
        with open(_probe.DRIVER_VERSION_FILE) as file:
            match = _MODULE_VERSION.search(file.readline())
    except OSError:
        return None
    return match.group(1) if match else None


def _load_nvml() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(_NVML_LIBRARY)
    except OSError:
        return None
