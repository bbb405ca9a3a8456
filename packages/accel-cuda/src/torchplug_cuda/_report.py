"""The ``cuda`` section of ``core env``: driver, CUDA and library versions, and every visible GPU."""

from __future__ import annotations

import os
from typing import Any

from torchplug_cuda._driver import driver_versions
from torchplug_cuda._probe import VISIBLE_DEVICES_ENV

__all__ = ["environment_report"]


def environment_report() -> dict[str, Any]:
    """What a bug report about GPUs needs; a missing piece is a None value, never an exception.

    Initialises CUDA to read the GPUs' properties: ``core env`` is a diagnostic, never part of training.
    """
    import torch

    from torchplug_cuda.devices import cuda_unavailable_reason, num_cuda_devices

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
