"""The boundary to DeepSpeed: imported only when a DeepSpeed plugin is used, with errors that say how to get it.

Every use of ``deepspeed`` in this package goes through the helpers here, so there is one place
that knows which module holds what, one error for a missing library, and one place that sets
DeepSpeed's accelerator. This module imports neither torch nor deepspeed at import time:
``core plugins list`` imports it for :func:`probe`.

DeepSpeed picks an accelerator when it is first imported (CUDA if torch sees a GPU, else the
CPU, ...). torchplug decides the hardware itself, so :func:`use_accelerator` tells DeepSpeed which
one to use (through ``DS_ACCELERATOR`` before the import, and ``set_accelerator`` after it) and
never lets it guess.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available
from torchplug.utilities.rank_zero import rank_zero_warn

__all__ = [
    "INSTALL_HINT",
    "MINIMUM_VERSION",
    "NOT_INSTALLED",
    "DeepSpeedUnavailableError",
    "deepspeed",
    "import_deepspeed",
    "probe",
    "report",
    "use_accelerator",
]

INSTALL_HINT: Final = "pip install deepspeed (or pip install 'strategy-deepspeed[deepspeed]')"

#: The reason given everywhere deepspeed is needed but missing.
NOT_INSTALLED: Final = f"deepspeed is not installed. Hint: {INSTALL_HINT}"

#: The oldest DeepSpeed with what the strategy relies on (``managed_gradient_accumulation``).
MINIMUM_VERSION: Final = (0, 19, 8)

#: DeepSpeed's name for its accelerator of each torch device type (DeepSpeed's own list).
_DS_ACCELERATORS: Final = {
    "cpu": "cpu_accelerator:CPU_Accelerator",
    "cuda": "cuda_accelerator:CUDA_Accelerator",
    "xpu": "xpu_accelerator:XPU_Accelerator",
    "npu": "npu_accelerator:NPU_Accelerator",
    "mps": "mps_accelerator:MPS_Accelerator",
    "hpu": "hpu_accelerator:HPU_Accelerator",
    "mlu": "mlu_accelerator:MLU_Accelerator",
}


class DeepSpeedUnavailableError(PluginUnavailableError, ImportError):
    """deepspeed is missing, too old, or cannot serve the chosen hardware; the message says what to do.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when deepspeed can be found, else why not.

    Looks for the package without importing it, so it imports neither deepspeed nor torch.
    """
    return None if module_available("deepspeed") else NOT_INSTALLED


def import_deepspeed(module: str = "deepspeed") -> ModuleType:
    """Import ``module`` (``"deepspeed"``, ``"deepspeed.utils.zero_to_fp32"``...) on first use.

    Call :func:`use_accelerator` first where the accelerator matters: importing ``deepspeed``
    makes it choose one.

    Raises:
        DeepSpeedUnavailableError: deepspeed is not installed, is older than
            :data:`MINIMUM_VERSION`, or fails to import (for example a build for another torch).
    """
    try:
        root = importlib.import_module("deepspeed")
        imported = importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "deepspeed":
            raise DeepSpeedUnavailableError(NOT_INSTALLED) from exc
        raise DeepSpeedUnavailableError(
            f"deepspeed is installed, but {module} cannot be imported: {exc}. Hint: reinstall deepspeed for "
            "the installed torch (pip install --force-reinstall deepspeed)"
        ) from exc
    _check_version(str(getattr(root, "__version__", "0")))
    return imported


def deepspeed() -> Any:
    """The ``deepspeed`` package (see :func:`import_deepspeed`)."""
    return import_deepspeed()


def _check_version(version: str) -> None:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < MINIMUM_VERSION:
        wanted = ".".join(map(str, MINIMUM_VERSION))
        raise DeepSpeedUnavailableError(
            f"deepspeed {version} is too old: strategy-deepspeed needs {wanted} or newer (its caller-owned "
            f"gradient accumulation). Hint: pip install 'deepspeed>={wanted}'"
        )


def use_accelerator(device_type: str) -> Any:
    """Make DeepSpeed use its accelerator for torch device type ``device_type``; return that accelerator.

    Before deepspeed is imported, ``DS_ACCELERATOR`` is set so that its import-time detection is
    skipped; after the import, ``set_accelerator`` installs the accelerator explicitly.

    Raises:
        DeepSpeedUnavailableError: DeepSpeed has no accelerator for ``device_type``, or
            ``DS_ACCELERATOR`` names another one than torchplug's accelerator.
    """
    target = _DS_ACCELERATORS.get(device_type)
    if target is None:
        raise DeepSpeedUnavailableError(
            f"DeepSpeed has no accelerator for torch device type {device_type!r}; it supports "
            f"{', '.join(sorted(_DS_ACCELERATORS))}. Hint: use another strategy (ddp, fsdp) on this hardware"
        )
    given = os.environ.get("DS_ACCELERATOR")
    if given is not None and given != device_type:
        raise DeepSpeedUnavailableError(
            f"DS_ACCELERATOR={given!r} asks DeepSpeed for another accelerator than the Trainer's ({device_type!r}). "
            f"Hint: unset DS_ACCELERATOR (the strategy sets DeepSpeed's accelerator from the Trainer's), or "
            f"choose accelerator={given!r}"
        )
    already = sys.modules.get("deepspeed") is not None
    os.environ["DS_ACCELERATOR"] = device_type
    real = import_deepspeed("deepspeed.accelerator.real_accelerator")
    current = real.ds_accelerator
    if current is not None and getattr(current, "_name", None) == device_type:
        return current
    module_name, _, class_name = target.partition(":")
    accelerator = getattr(import_deepspeed(f"deepspeed.accelerator.{module_name}"), class_name)()
    real.set_accelerator(accelerator)
    if already and current is not None:
        rank_zero_warn(
            f"deepspeed was imported before the Trainer set its accelerator and chose "
            f"{getattr(current, '_name', current)!r}; it now uses {device_type!r}, the Trainer's. Modules of "
            "deepspeed imported earlier may keep the first choice. Hint: import deepspeed after building "
            f"the Trainer, or set DS_ACCELERATOR={device_type}"
        )
    return accelerator


def report() -> dict[str, Any]:
    """What ``core env`` shows about DeepSpeed: its version, or why it is unavailable (never imports it)."""
    data: dict[str, Any] = {"deepspeed": distribution_version("deepspeed")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
    return data
