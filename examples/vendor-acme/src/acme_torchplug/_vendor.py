"""The boundary to acme_runtime: the one module that imports it, and only on first use.

Every use of the runtime goes through the helpers here, so there is one place that knows its API
and one error that says how to install it. This module imports neither torch nor acme_runtime at
import time: `core plugins list` imports it to call :func:`probe`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = ["INSTALL_HINT", "NOT_INSTALLED", "AcmeRuntimeUnavailableError", "device_count", "probe", "report", "runtime"]

INSTALL_HINT: Final = "pip install 'acme-torchplug[runtime]' (or: pip install acme-runtime)"

#: The reason given everywhere acme_runtime is needed but missing.
NOT_INSTALLED: Final = f"acme_runtime is not installed. Hint: {INSTALL_HINT}"


class AcmeRuntimeUnavailableError(PluginUnavailableError, ImportError):
    """acme_runtime is needed but missing, or fails to import; the message says how to install it."""


def probe() -> str | None:
    """Cheap availability check for `core plugins list`: None when acme_runtime can be found, else why not."""
    return None if module_available("acme_runtime") else NOT_INSTALLED


def runtime() -> ModuleType:
    """acme_runtime, imported on first use.

    Raises:
        AcmeRuntimeUnavailableError: It is not installed, or fails to import.
    """
    try:
        return importlib.import_module("acme_runtime")
    except ModuleNotFoundError as exc:
        if exc.name == "acme_runtime":
            raise AcmeRuntimeUnavailableError(NOT_INSTALLED) from exc
        raise AcmeRuntimeUnavailableError(f"acme_runtime cannot be imported: {exc}. Hint: {INSTALL_HINT}") from exc
    except ImportError as exc:
        raise AcmeRuntimeUnavailableError(f"acme_runtime cannot be imported: {exc}. Hint: {INSTALL_HINT}") from exc


def device_count() -> int:
    """The Acme devices of this machine, counted without initialising the runtime (safe before a fork)."""
    return int(runtime().device_count())


def report() -> dict[str, Any]:
    """What `core env` shows about acme_runtime: its version and device count, or why it is missing."""
    data: dict[str, Any] = {"acme_runtime": distribution_version("acme-runtime")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
        return data
    try:
        data["devices"] = device_count()
    except Exception as exc:  # a report never fails: the error is the finding
        data["devices"] = f"{type(exc).__name__}: {exc}"
    return data
