"""accel-mps's boundary to torch's MPS backend: ``torch.backends.mps`` (is it there?) and ``torch.mps`` (use it).

Every use of MPS in this package goes through the helpers here. This module imports no torch at
import time: ``core plugins list`` imports it for :func:`probe`, which answers from the operating
system alone (MPS is Apple's Metal, on macOS only). Whether this torch was built with MPS and sees
a GPU is asked of torch by :func:`mps_unavailable_reason`, on use.
"""

from __future__ import annotations

import platform
import sys
from types import ModuleType
from typing import Any, Final

from torchplug.utilities.imports import distribution_version

__all__ = [
    "MACOS_HINT",
    "autocast_supported",
    "backend",
    "bf16_supported",
    "environment_report",
    "mps",
    "mps_unavailable_reason",
    "probe",
]

#: What to do on a machine without MPS.
MACOS_HINT: Final = "Hint: use accelerator='cpu' (or 'cuda' with accel-cuda on an NVIDIA machine)."


def probe() -> str | None:
    """None when MPS may run here (macOS with torch installed), else the reason. Imports no torch."""
    if distribution_version("torch") is None:
        return "torch is not installed. Hint: pip install torch"
    if sys.platform != "darwin":
        return (
            f"MPS is Apple's Metal GPU backend, only on macOS (this is {platform.system() or sys.platform}): "
            f"torch.backends.mps.is_available() is False here. {MACOS_HINT}"
        )
    return None


def backend() -> ModuleType:
    """``torch.backends.mps``: whether this torch has MPS and this Mac can run it."""
    import torch.backends.mps

    return torch.backends.mps


def mps() -> ModuleType:
    """``torch.mps``: the device's memory, random state and synchronisation."""
    import torch.mps

    return torch.mps


def mps_unavailable_reason() -> str | None:
    """Why MPS cannot run here, asked of torch (None when it can).

    ``is_built()`` False: this torch has no MPS (a Linux or CUDA build). ``is_available()`` False
    on a build with MPS: macOS older than 12.3, or a Mac without a Metal GPU.
    """
    import torch

    mps_backend = backend()
    if not mps_backend.is_built():
        return (
            f"torch {torch.__version__} was built without MPS (torch.backends.mps.is_built() is False); MPS comes "
            f"with torch's macOS wheels. {MACOS_HINT}"
        )
    if not mps_backend.is_available():
        return (
            "torch.backends.mps.is_available() is False: MPS needs macOS 12.3 or newer on a Mac with a Metal GPU "
            f"(Apple silicon, or an AMD GPU). {MACOS_HINT}"
        )
    return None


def autocast_supported() -> bool:
    """Whether this torch can autocast on ``"mps"`` (``torch.amp.is_autocast_available``)."""
    import torch

    return bool(torch.amp.is_autocast_available("mps"))


def bf16_supported() -> bool:
    """Whether MPS computes in bfloat16 here: Metal has it from macOS 14."""
    return bool(backend().is_macos_or_newer(14, 0))


def environment_report() -> dict[str, Any]:
    """What a bug report about MPS needs; a missing piece is a None value, never an exception."""
    import torch

    reason = probe() or mps_unavailable_reason()
    report: dict[str, Any] = {
        "available": reason is None,
        "reason": reason,
        "torch": torch.__version__,
        "macos": platform.mac_ver()[0] or None,
        "machine": platform.machine(),
        "is_built": bool(backend().is_built()),
        "autocast": autocast_supported(),
    }
    if reason is None:
        report["bf16"] = bf16_supported()
        report["recommended_max_memory_bytes"] = int(mps().recommended_max_memory())
    return report
