"""The boundary to poptorch: imported only when an IPU plugin is used, with errors that say how to get it.

Every use of poptorch in this package goes through the helpers here, so there is one place that
knows which poptorch API to call, and one error for a missing poptorch. This module imports
neither torch nor poptorch at import time: ``core plugins list`` imports it for :func:`probe`.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = [
    "INSTALL_HINT",
    "NOT_INSTALLED",
    "PoptorchUnavailableError",
    "hardware_available",
    "import_poptorch",
    "ipu_count",
    "probe",
    "report",
]

INSTALL_HINT: Final = (
    "install Graphcore's Poplar SDK (https://www.graphcore.ai/downloads) and the poptorch wheel "
    "it ships: pip install <sdk>/poptorch-*.whl"
)

#: The reason given everywhere poptorch is needed but missing.
NOT_INSTALLED: Final = f"poptorch is not installed. Hint: {INSTALL_HINT}"

#: The largest IPU count asked for by :func:`ipu_count` (an IPU-POD64).
_MAX_IPUS: Final = 64


class PoptorchUnavailableError(PluginUnavailableError, ImportError):
    """poptorch is needed but is not installed, or fails to import; the message says how to fix it.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when poptorch can be found, else why not.

    Looks for the package without importing it, so it imports neither poptorch nor torch.
    """
    return None if module_available("poptorch") else NOT_INSTALLED


def import_poptorch() -> ModuleType:
    """Import poptorch on first use.

    Raises:
        PoptorchUnavailableError: poptorch is not installed, or it fails to import (most often:
            the Poplar SDK is not enabled in this shell).
    """
    try:
        return importlib.import_module("poptorch")
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "poptorch":
            raise PoptorchUnavailableError(NOT_INSTALLED) from exc
        raise PoptorchUnavailableError(
            f"poptorch is installed, but cannot be imported: {exc}. Hint: enable the Poplar SDK in this shell "
            "(source <sdk>/enable.sh) and install the poptorch wheel that ships with it"
        ) from exc


def hardware_available(num_ipus: int = 1) -> bool:
    """Whether this machine has ``num_ipus`` IPUs (``poptorch.ipuHardwareIsAvailable``; they may be busy)."""
    poptorch = import_poptorch()
    if not callable(getattr(poptorch, "ipuHardwareIsAvailable", None)):  # a partial or foreign install
        raise PoptorchUnavailableError(
            f"the poptorch at {getattr(poptorch, '__file__', '?')} has no ipuHardwareIsAvailable(). Hint: reinstall "
            "the poptorch wheel that ships with your Poplar SDK (pip install <sdk>/poptorch-*.whl)"
        )
    try:
        return bool(poptorch.ipuHardwareIsAvailable(num_ipus))
    except TypeError:  # poptorch before SDK 2.1 takes no count: it answers for one IPU
        return num_ipus == 1 and bool(poptorch.ipuHardwareIsAvailable())


def ipu_count() -> int:
    """The IPUs this machine can give one process: the largest power of two PopTorch says is there.

    Poplar attaches IPUs in groups of 1, 2, 4, 8... so a count that is not a power of two is never
    usable; 0 when there is no IPU.
    """
    count, ask = 0, 1
    while ask <= _MAX_IPUS and hardware_available(ask):
        count, ask = ask, ask * 2
    return count


def report() -> dict[str, Any]:
    """What ``core env`` shows about poptorch: its version and the IPUs it finds."""
    data: dict[str, Any] = {"poptorch": distribution_version("poptorch")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
        return data
    try:
        data["ipus"] = ipu_count()
    except Exception as exc:  # a report never fails: the error is the finding
        data["ipus"] = f"{type(exc).__name__}: {exc}"
    return data
