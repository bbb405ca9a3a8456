"""The boundary to torch_xla: imported only when a TPU plugin is used, with errors that say how to get it.

Every use of torch_xla in this package goes through the helpers here, so there is one place that
knows which torch_xla API to call on which version, and one error for a missing torch_xla. This
module imports neither torch nor torch_xla at import time: ``core plugins list`` imports it for
:func:`probe`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, cast

from torchplug import PluginUnavailableError
from torchplug.utilities.imports import distribution_version, module_available

if TYPE_CHECKING:
    import torch

__all__ = [
    "INSTALL_HINT",
    "NOT_INSTALLED",
    "TorchXLAUnavailableError",
    "device",
    "device_loader",
    "import_xla",
    "local_device_count",
    "probe",
    "report",
    "runtime",
    "sync",
    "xla_model",
]

INSTALL_HINT: Final = "pip install torch_xla (see https://github.com/pytorch/xla for the build matching your torch)"

#: The reason given everywhere torch_xla is needed but missing.
NOT_INSTALLED: Final = f"torch_xla is not installed. Hint: {INSTALL_HINT}"

#: DataLoader attributes the core reads (sampler.set_epoch, len) that MpDeviceLoader does not expose.
_LOADER_ATTRIBUTES: Final = ("dataset", "sampler", "batch_sampler", "batch_size")


class TorchXLAUnavailableError(PluginUnavailableError, ImportError):
    """torch_xla is needed but is not installed, or fails to import; the message says how to fix it.

    It is both a :class:`torchplug.PluginUnavailableError` and an ``ImportError``.
    """


def probe() -> str | None:
    """Cheap availability check for ``core plugins list``: None when torch_xla can be found, else why not.

    Looks for the package without importing it, so it imports neither torch_xla nor torch.
    """
    return None if module_available("torch_xla") else NOT_INSTALLED


def import_xla(module: str = "torch_xla") -> ModuleType:
    """Import ``module`` (``"torch_xla"``, ``"torch_xla.core.xla_model"``...) on first use.

    Raises:
        TorchXLAUnavailableError: torch_xla is not installed, or it fails to import (for example
            a build for another version of torch).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "torch_xla":
            raise TorchXLAUnavailableError(NOT_INSTALLED) from exc
        raise TorchXLAUnavailableError(
            f"torch_xla is installed, but {module} cannot be imported: {exc}. Hint: {INSTALL_HINT}"
        ) from exc


def xla_model() -> Any:
    """``torch_xla.core.xla_model`` (collectives, device memory, random state)."""
    return import_xla("torch_xla.core.xla_model")


def runtime() -> Any:
    """``torch_xla.runtime`` (ranks, world size, device counts)."""
    return import_xla("torch_xla.runtime")


def device(index: int | None = None) -> torch.device:
    """This process's XLA device, or the device ``index``. Starts the XLA runtime in this process."""
    torch_xla = import_xla()
    if hasattr(torch_xla, "device"):  # torch_xla >= 2.5
        return torch_xla.device() if index is None else torch_xla.device(index)  # type: ignore[no-any-return]
    return xla_model().xla_device(index)  # type: ignore[no-any-return]


def sync() -> None:
    """Cut the lazy graph here and run it on the device (``torch_xla.sync()``, ``xm.mark_step()`` before 2.6)."""
    torch_xla = import_xla()
    if hasattr(torch_xla, "sync"):
        torch_xla.sync()
    else:
        xla_model().mark_step()


def local_device_count() -> int:
    """The XLA devices of this host.

    On TPUs the chips are counted on the PCI bus, without starting the XLA runtime: the runtime
    must not start in a process that later launches one process per device (``xmp.spawn``
    refuses to). Other PJRT devices (``PJRT_DEVICE=CPU``, ``CUDA``) are counted by the runtime.
    """
    xr = runtime()
    if xr.device_type() in (None, "TPU"):
        tpu = import_xla("torch_xla._internal.tpu")
        if tpu.num_available_chips() == 0:  # asking for cores per chip would query the TPU metadata server
            return 0
        return int(tpu.num_available_devices())
    return int(xr.addressable_runtime_device_count())


def device_loader(loader: Iterable[Any], device: torch.device) -> Iterable[Any]:
    """Wrap ``loader`` in torch_xla's ``MpDeviceLoader``, which moves batches to ``device`` in the background.

    The wrapper keeps the loader's ``dataset``, ``sampler``, ``batch_sampler`` and ``batch_size``,
    so the Trainer can still set the sampler's epoch. A loader already wrapped is returned as it is.
    """
    parallel_loader = import_xla("torch_xla.distributed.parallel_loader")
    if isinstance(loader, parallel_loader.MpDeviceLoader):
        return cast("Iterable[Any]", loader)
    wrapped: Iterable[Any] = parallel_loader.MpDeviceLoader(loader, device)
    for name in _LOADER_ATTRIBUTES:
        if hasattr(loader, name) and not hasattr(wrapped, name):
            setattr(wrapped, name, getattr(loader, name))
    return wrapped


def report() -> dict[str, Any]:
    """What ``core env`` shows about torch_xla: its version, the PJRT device type and the device count."""
    data: dict[str, Any] = {
        "torch_xla": distribution_version("torch_xla"),
        "PJRT_DEVICE": os.environ.get("PJRT_DEVICE"),
    }
    reason = probe()
    if reason is not None:
        data["unavailable"] = reason
        return data
    try:
        data["devices"] = local_device_count()
    except Exception as exc:  # a report never fails: the error is the finding
        data["devices"] = f"{type(exc).__name__}: {exc}"
    return data
