"""The boundary to MLflow: imported only when the logger is used, with an error that says how to get it.

This module imports neither torch nor mlflow at import time: ``core plugins list`` imports it for
:func:`probe`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = ["INSTALL_HINT", "NOT_INSTALLED", "MLflowUnavailableError", "import_mlflow", "probe", "report"]

INSTALL_HINT: Final = "pip install mlflow (or pip install 'logger-mlflow[mlflow]'; mlflow-skinny for the client alone)"

#: The reason given everywhere mlflow is needed but missing.
NOT_INSTALLED: Final = f"mlflow is not installed. Hint: {INSTALL_HINT}"


class MLflowUnavailableError(PluginUnavailableError, ImportError):
    """mlflow is missing or cannot be imported; the message says what to install.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when mlflow can be found, else why not.

    Looks for the package without importing it, so it imports neither mlflow nor torch.
    """
    return None if module_available("mlflow") else NOT_INSTALLED


def import_mlflow(module: str = "mlflow") -> ModuleType:
    """Import ``module`` (``"mlflow"``, ``"mlflow.entities"``...) on first use.

    Raises:
        MLflowUnavailableError: mlflow is not installed, or fails to import.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if probe() is not None:  # mlflow itself is missing (whichever of its modules was asked for)
            raise MLflowUnavailableError(NOT_INSTALLED) from exc
        raise MLflowUnavailableError(
            f"mlflow is installed, but {module} cannot be imported: {exc}. Hint: reinstall it ({INSTALL_HINT})"
        ) from exc


def report() -> dict[str, Any]:
    """What ``core env`` shows about MLflow: its version and tracking URI variable (never imports it)."""
    data: dict[str, Any] = {
        "mlflow": distribution_version("mlflow") or distribution_version("mlflow-skinny"),
        "MLFLOW_TRACKING_URI": os.environ.get("MLFLOW_TRACKING_URI"),
    }
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
    return data
