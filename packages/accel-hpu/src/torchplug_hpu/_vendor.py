"""The boundary to habana_frameworks: imported only when an HPU plugin is used, with errors that say how to get it.

Every use of habana_frameworks in this package goes through the helpers here, so there is one
place that knows which module holds what, and one error for a missing library. This module
imports neither torch nor habana_frameworks at import time: ``core plugins list`` imports it
for :func:`probe`.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any, Final

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

__all__ = [
    "FP8_MODULE",
    "INSTALL_HINT",
    "NOT_INSTALLED",
    "HabanaUnavailableError",
    "device_count",
    "fp8_unavailable_reason",
    "hpu",
    "import_habana",
    "import_hccl",
    "mark_step",
    "probe",
    "report",
    "require_fp8",
    "transformer_engine",
]

INSTALL_HINT: Final = (
    "install Intel Gaudi's PyTorch packages (habana-torch-plugin, see "
    "https://docs.habana.ai/en/latest/Installation_Guide/index.html), or use Intel's Gaudi PyTorch "
    "container"
)

#: The reason given everywhere habana_frameworks is needed but missing.
NOT_INSTALLED: Final = f"habana_frameworks is not installed. Hint: {INSTALL_HINT}"

#: Where Intel Gaudi's transformer engine (fp8 layers and ``fp8_autocast``) lives.
FP8_MODULE: Final = "habana_frameworks.torch.hpex.experimental.transformer_engine"

#: Device names (``hpu.get_device_name()``) of the Gaudi generations without fp8.
_NO_FP8_DEVICES: Final = frozenset({"GAUDI", "GAUDI1"})


class HabanaUnavailableError(PluginUnavailableError, ImportError):
    """habana_frameworks (or the part of it a feature needs) is missing; the message says how to get it.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when habana_frameworks can be found, else why not.

    Looks for the package without importing it, so it imports neither habana_frameworks nor torch.
    """
    return None if module_available("habana_frameworks") else NOT_INSTALLED


def import_habana(module: str = "habana_frameworks.torch") -> ModuleType:
    """Import ``module`` (``"habana_frameworks.torch.hpu"``, ``...core``...) on first use.

    Raises:
        HabanaUnavailableError: habana_frameworks is not installed, or fails to import (for
            example a build for another version of torch).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "habana_frameworks":
            raise HabanaUnavailableError(NOT_INSTALLED) from exc
        raise HabanaUnavailableError(
            f"habana_frameworks is installed, but {module} cannot be imported: {exc}. Hint: install the "
            "habana-torch-plugin of your Intel Gaudi software release, built for the installed torch"
        ) from exc


def hpu() -> Any:
    """``habana_frameworks.torch.hpu``: device count, names, memory statistics, random state."""
    return import_habana("habana_frameworks.torch.hpu")


def device_count() -> int:
    """The HPUs this process can see."""
    return int(hpu().device_count())


def synchronize() -> None:
    """Wait for the work queued on the HPU (``habana_frameworks.torch.hpu.synchronize``)."""
    hpu().synchronize()


def mark_step() -> None:
    """Cut the lazy graph here and run it (``htcore.mark_step()``; a no-op in eager mode)."""
    import_habana("habana_frameworks.torch.core").mark_step()


def import_hccl() -> None:
    """Import ``habana_frameworks.torch.distributed.hccl``, which registers the ``hccl`` process-group backend."""
    import_habana("habana_frameworks.torch.distributed.hccl")


def transformer_engine() -> Any:
    """Intel Gaudi's transformer engine (fp8 ``Linear`` layers and ``fp8_autocast``).

    Raises:
        HabanaUnavailableError: habana_frameworks is missing, or is a release without fp8.
    """
    import_habana()
    try:
        return importlib.import_module(FP8_MODULE)
    except ImportError as exc:
        raise HabanaUnavailableError(
            f"precision='fp8' needs Intel Gaudi's transformer engine ({FP8_MODULE}), which the installed "
            f"habana_frameworks does not have ({exc}). Hint: upgrade Intel Gaudi's software stack to 1.14 or later, "
            "or use precision='bf16-mixed'"
        ) from exc


def require_fp8() -> Any:
    """The transformer engine, once it is certain that fp8 training can run here.

    Raises:
        HabanaUnavailableError: habana_frameworks is missing, or is a release without fp8.
        PluginUnavailableError: The HPU is a first-generation Gaudi, which has no fp8.
    """
    engine = transformer_engine()
    name = str(hpu().get_device_name()).upper()
    if name in _NO_FP8_DEVICES:
        raise PluginUnavailableError(
            f"precision='fp8' needs Gaudi2 or newer, but this HPU is a {name}. Hint: use precision='bf16-mixed'"
        )
    return engine


def fp8_unavailable_reason() -> str | None:
    """Why fp8 training cannot run here (see :func:`require_fp8`); None when it can."""
    try:
        require_fp8()
    except PluginUnavailableError as exc:
        return str(exc)
    return None


def report() -> dict[str, Any]:
    """What ``core env`` shows about habana_frameworks: its version, the HPUs and their kind."""
    data: dict[str, Any] = {"habana-torch-plugin": distribution_version("habana-torch-plugin")}
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
        return data
    try:
        data["devices"] = device_count()
        data["device_name"] = str(hpu().get_device_name()) if data["devices"] else None
        data["fp8"] = fp8_unavailable_reason() or True
    except Exception as exc:  # a report never fails: the error is the finding
        data["error"] = f"{type(exc).__name__}: {exc}"
    return data
