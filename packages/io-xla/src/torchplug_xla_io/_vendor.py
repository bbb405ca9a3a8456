"""io-xla's vendor boundary: torch_xla, used only where it is installed (this IO works without it).

So there is no probe and no install hint: without torch_xla, :class:`~torchplug_xla_io.XLACheckpointIO`
is the core's torch IO with every tensor moved to the CPU. Nothing here imports torch_xla at
import time.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from torchplug.utilities.imports import module_available

if TYPE_CHECKING:
    import torch

__all__ = ["batched_to_cpu", "device"]


def batched_to_cpu() -> Any | None:
    """torch_xla's batched transfer to the CPU (``xm._maybe_convert_to_cpu``), or None.

    None when torch_xla is not imported in this process (then this process holds no XLA tensor),
    or when this version of torch_xla has no such function (it is private in torch_xla).
    """
    xla_model = importlib.import_module("torch_xla.core.xla_model") if "torch_xla" in sys.modules else None
    return getattr(xla_model, "_maybe_convert_to_cpu", None)


def device() -> torch.device | None:
    """This process's XLA device when torch_xla is installed (this starts the XLA runtime), else None."""
    if not module_available("torch_xla"):
        return None
    torch_xla = importlib.import_module("torch_xla")
    if hasattr(torch_xla, "device"):  # torch_xla >= 2.5
        return torch_xla.device()  # type: ignore[no-any-return]
    return importlib.import_module("torch_xla.core.xla_model").xla_device()  # type: ignore[no-any-return]
