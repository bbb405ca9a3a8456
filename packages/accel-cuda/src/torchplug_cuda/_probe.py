"""Why CUDA cannot run here, decided without importing torch (for ``core plugins list`` and ``"auto"``).

Three cheap checks, each certain when it says no, so that a working GPU is never hidden:

1. The installed torch is a CPU build: its version's local part is ``+cpu`` (read from the
   distribution's metadata with :mod:`importlib.metadata`, so torch itself is not imported).
2. ``CUDA_VISIBLE_DEVICES`` hides every GPU (empty, ``-1``, garbage, or a repeated id: CUDA reads
   all of these as "no GPU").
3. No NVIDIA driver: on Linux neither ``/proc/driver/nvidia/version`` nor the NVML library
   ``libnvidia-ml`` exists (``ctypes.util.find_library`` reads the linker cache; it is only asked
   when the ``/proc`` file is missing).

Anything subtler (a driver that reports no GPU, ids that name GPUs the driver does not have) is
left to :meth:`torchplug_cuda.CUDAAccelerator.unavailable_reason`, which asks torch.
"""

from __future__ import annotations

import ctypes.util
import importlib.metadata
import os
import sys
from typing import Final

__all__ = ["VISIBLE_DEVICES_ENV", "driver_reason", "hidden_reason", "probe", "torch_build_reason", "visible_entries"]

#: The environment variable CUDA reads to decide which GPUs a process sees, and in which order.
VISIBLE_DEVICES_ENV: Final = "CUDA_VISIBLE_DEVICES"

#: Written by the NVIDIA kernel module on Linux; its presence means the driver is loaded.
DRIVER_VERSION_FILE: Final = "/proc/driver/nvidia/version"

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
