"""The boundary to Horovod: imported only when the Horovod plugins are used, with errors that say how to get it.

This module imports neither torch nor horovod at import time: ``core plugins list`` imports it
for :func:`probe`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = ["ALTERNATIVES", "NOT_INSTALLED", "HorovodUnavailableError", "hvd", "probe", "report"]

#: What to use instead, named in every error.
ALTERNATIVES: Final = (
    "Or use strategy='ddp' started by torchrun, or by mpirun with plugins=['mpi'] (the `mpi` cluster environment)"
)

#: Why horovod is missing, and how to get it.
NOT_INSTALLED: Final = (
    "horovod is not installed. `pip install horovod` fails against torch 2.1 and later: Horovod 0.28.1 (its last "
    "release, 2023) builds with C++14 and torch's headers need C++17. Hint: build it with "
    "`python tools/build_horovod.py` from the torchplug repository (sets C++17, Gloo, no MPI; see the "
    f"strategy-horovod README). {ALTERNATIVES}"
)


class HorovodUnavailableError(PluginUnavailableError, ImportError):
    """horovod (or its PyTorch extension) is missing; the message says how to get it and what to use instead."""


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when horovod can be found, else why not."""
    return None if module_available("horovod") else NOT_INSTALLED


def hvd() -> Any:
    """``horovod.torch``, imported on first use.

    Raises:
        HorovodUnavailableError: horovod is not installed, or was built without PyTorch support
            or for another torch.
    """
    return _import("horovod.torch")


def _import(module: str) -> ModuleType:
    try:
        importlib.import_module("horovod")  # first: a missing horovod is reported as such
        return importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "horovod":
            raise HorovodUnavailableError(NOT_INSTALLED) from exc
        raise HorovodUnavailableError(
            f"horovod is installed, but {module} cannot be imported: {exc}. Hint: rebuild it for the installed torch "
            f"with HOROVOD_WITH_PYTORCH=1 (python tools/build_horovod.py). {ALTERNATIVES}"
        ) from exc


def report() -> dict[str, Any]:
    """What ``core env`` shows about Horovod: its version, or why it is unavailable (never imports it)."""
    data: dict[str, Any] = {"horovod": distribution_version("horovod")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
    return data
