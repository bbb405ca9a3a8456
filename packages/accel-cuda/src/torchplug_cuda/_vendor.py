"""accel-cuda's vendor boundary: whether CUDA can run here, the driver's versions, the ``core env`` report.

Imports no torch at import time: ``core plugins list`` imports this module for :func:`probe`.

:func:`probe` decides why CUDA cannot run here from three cheap checks, each certain when it says
no, so that a working GPU is never hidden:

1. The installed torch is a CPU build: its version's local part is ``+cpu`` (read from the
   distribution's metadata with :mod:`importlib.metadata`, so torch itself is not imported).
2. ``CUDA_VISIBLE_DEVICES`` hides every GPU (empty, ``-1``, garbage, or a repeated id: CUDA reads
   all of these as "no GPU").
3. No NVIDIA driver: on Linux neither ``/proc/driver/nvidia/version`` nor the NVML library
   ``libnvidia-ml`` exists (``ctypes.util.find_library`` reads the linker cache; it is only asked
   when the ``/proc`` file is missing).

Anything subtler (a driver that reports no GPU, ids that name GPUs the driver does not have) is
left to :meth:`torchplug_cuda.CUDAAccelerator.unavailable_reason`, which asks torch. The driver's
own versions (:func:`driver_versions`) are read from ``/proc`` or NVML through ctypes (no torch,
no pynvml).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import os
import re
import sys
from typing import Any, Final

__all__ = [
    "DRIVER_VERSION_FILE",
    "VISIBLE_DEVICES_ENV",
    "driver_reason",
    "driver_versions",
    "environment_report",
    "hidden_reason",
    "probe",
    "torch_build_reason",
    "visible_entries",
]

#: The environment variable CUDA reads to decide which GPUs a process sees, and in which order.
VISIBLE_DEVICES_ENV: Final = "CUDA_VISIBLE_DEVICES"

#: Written by the NVIDIA kernel module on Linux; its presence means the driver is loaded.
DRIVER_VERSION_FILE: Final = "/proc/driver/nvidia/version"

_MODULE_VERSION: Final = re.compile(r"Kernel Module(?: for \S+)?\s+(\d[\w.]*)")
_NVML_LIBRARY: Final = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"

_INSTALL_HINT: Final = (
    "Hint: install a CUDA build of torch (https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
)


def probe() -> str | None:
    """None when CUDA may run here, else the reason it cannot. Imports no torch.

    Registered as the ``cuda`` entry's probe: ``core plugins list`` shows its answer, and
    ``accelerator="auto"`` skips CUDA without importing anything when it says no.
    """
    return torch_build_reason() or hidden_reason() or driver_reason()


def torch_build_reason() -> str | None:
    """Why the installed torch cannot use CUDA (not installed, a CPU build, macOS), read from its metadata."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return f"torch is not installed. {_INSTALL_HINT}"
    local = version.partition("+")[2].lower()
    if local.startswith("cpu"):
        return f"torch was built without CUDA (torch {version}). {_INSTALL_HINT}"
    if sys.platform == "darwin":
        return f"torch has no CUDA on macOS (torch {version}). Hint: use accelerator='mps' or 'cpu'."
    return None


def visible_entries(value: str) -> list[str]:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value selects, as CUDA reads it (and torch mirrors it).

    Entries are ids (``"0"``) or UUIDs (``"GPU-..."``, ``"MIG-..."``). Reading stops at the first
    entry that is neither (so ``"-1"`` and ``""`` select nothing), and a repeated entry makes the
    whole value select nothing.
    """
    entries: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if item.startswith(("GPU-", "MIG-")):
            key = item
        else:
            digits = item[1:] if item.startswith("+") else item
            digits = digits[: len(digits) - len(digits.lstrip("0123456789"))]
            if not digits:
                break
            key = str(int(digits))
        if key in entries:
            return []
        entries.append(key)
    return entries


def hidden_reason(environ: dict[str, str] | None = None) -> str | None:
    """Why ``CUDA_VISIBLE_DEVICES`` hides every GPU, or None when it is unset or selects some."""
    env = os.environ if environ is None else environ
    value = env.get(VISIBLE_DEVICES_ENV)
    if value is None or visible_entries(value):
        return None
    first = value.split(",")[0].strip()
    if not value.strip():
        why = "it is empty"
    elif visible_entries(first):
        why = "it names a GPU twice, which CUDA reads as no GPU at all"
    elif first.startswith("-"):
        why = "a negative id ends the list"
    else:
        why = "it does not start with a GPU id or UUID"
    return (
        f"{VISIBLE_DEVICES_ENV}={value!r} hides every GPU ({why}). "
        f"Hint: unset {VISIBLE_DEVICES_ENV}, or list the GPUs to use, e.g. {VISIBLE_DEVICES_ENV}=0,1."
    )


def driver_reason() -> str | None:
    """Why there is certainly no NVIDIA driver here, or None when there may be one.

    Only Linux and Windows are checked; ROCm builds of torch (AMD GPUs through ``torch.cuda``)
    need no NVIDIA driver and are never refused here.
    """
    if _is_rocm_build():
        return None
    if sys.platform.startswith("linux"):
        if os.path.exists(DRIVER_VERSION_FILE) or ctypes.util.find_library("nvidia-ml"):
            return None
        where = f"neither {DRIVER_VERSION_FILE} nor libnvidia-ml (NVML) is present"
    elif sys.platform == "win32":
        if ctypes.util.find_library("nvml"):
            return None
        where = "nvml.dll (NVML) is not on PATH"
    else:
        return None
    return (
        f"no NVIDIA driver found ({where}). Hint: install the NVIDIA driver (nvidia-smi should list your GPUs); "
        "inside a container, start it with GPUs (docker run --gpus all); or use accelerator='cpu'."
    )


def _is_rocm_build() -> bool:
    try:
        return "rocm" in importlib.metadata.version("torch").partition("+")[2].lower()
    except importlib.metadata.PackageNotFoundError:
        return False


# -- versions --------------------------------------------------------------------------------


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
        with open(DRIVER_VERSION_FILE) as file:
            match = _MODULE_VERSION.search(file.readline())
    except OSError:
        return None
    return match.group(1) if match else None


def _load_nvml() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(_NVML_LIBRARY)
    except OSError:
        return None


# -- the core env report ----------------------------------------------------------------------


def environment_report() -> dict[str, Any]:
    """What a bug report about GPUs needs; a missing piece is a None value, never an exception.

    Initialises CUDA to read the GPUs' properties: ``core env`` is a diagnostic, never part of training.
    """
    import torch

    from torchplug_cuda._devices import cuda_unavailable_reason, num_cuda_devices

    reason = cuda_unavailable_reason()
    report: dict[str, Any] = {
        "available": reason is None,
        "reason": reason,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": _cudnn_version(torch),
        "nccl": _nccl_version(torch),
        **driver_versions(),
        VISIBLE_DEVICES_ENV: os.environ.get(VISIBLE_DEVICES_ENV),
        "devices": [],
    }
    if reason is None:
        report["devices"] = [_device(torch, index) for index in range(num_cuda_devices())]
    return report


def _cudnn_version(torch: Any) -> int | None:
    """As torch reports it (cuDNN 9: 90100 is 9.1.0); None without cuDNN."""
    try:
        version = torch.backends.cudnn.version()
    except Exception:  # a broken cuDNN install is itself worth reporting, but as a value
        return None
    return None if version is None else int(version)


def _nccl_version(torch: Any) -> str | None:
    try:
        return ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # torch without NCCL (CPU builds, Windows)
        return None


def _device(torch: Any, index: int) -> dict[str, Any]:
    try:
        props = torch.cuda.get_device_properties(index)
    except Exception as exc:  # one sick GPU must not hide the others
        return {"id": index, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "id": index,
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_total_bytes": int(props.total_memory),
        "multiprocessors": int(props.multi_processor_count),
    }
