"""The boundary to Weights & Biases: imported only when the logger is used, with an error that says how to get it.

This module imports neither torch nor wandb at import time: ``core plugins list`` imports it for
:func:`probe`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = ["INSTALL_HINT", "NOT_INSTALLED", "WandbUnavailableError", "import_wandb", "probe", "report", "require"]

INSTALL_HINT: Final = "pip install wandb (or pip install 'logger-wandb[wandb]')"

#: The reason given everywhere wandb is needed but missing.
NOT_INSTALLED: Final = f"wandb is not installed. Hint: {INSTALL_HINT}"


class WandbUnavailableError(PluginUnavailableError, ImportError):
    """wandb is missing or cannot be imported; the message says what to install.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when wandb can be found, else why not.

    Looks for the package without importing it, so it imports neither wandb nor torch.
    """
    return None if module_available("wandb") else NOT_INSTALLED


def require() -> None:
    """Raise :class:`WandbUnavailableError` now when wandb cannot be found (without importing it)."""
    reason = probe()
    if reason is not None:
        raise WandbUnavailableError(f"WandbLogger needs wandb: {reason}")


def import_wandb(module: str = "wandb") -> ModuleType:
    """Import ``module`` (``"wandb"``...) on first use.

    Raises:
        WandbUnavailableError: wandb is not installed, or fails to import.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if probe() is not None:  # wandb itself is missing (whichever of its modules was asked for)
            raise WandbUnavailableError(f"WandbLogger needs wandb: {NOT_INSTALLED}") from exc
        raise WandbUnavailableError(
            f"wandb is installed, but {module} cannot be imported: {exc}. Hint: reinstall it ({INSTALL_HINT})"
        ) from exc


def report() -> dict[str, Any]:
    """What ``core env`` shows about W&B: its version and mode variable (never imports it)."""
    data: dict[str, Any] = {"wandb": distribution_version("wandb"), "WANDB_MODE": os.environ.get("WANDB_MODE")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
    return data
