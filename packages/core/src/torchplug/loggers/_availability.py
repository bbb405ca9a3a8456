"""Cheap availability probes of the core's loggers: they find a library without importing it (no torch)."""

from __future__ import annotations

from typing import Final

from torchplug.utilities.imports import module_available

__all__ = ["TENSORBOARD_MISSING", "tensorboard_available", "tensorboard_probe"]

#: Why the TensorBoard logger cannot run, with what to install.
TENSORBOARD_MISSING: Final = (
    "tensorboard is not installed. Hint: pip install tensorboard (or core[tensorboard]), or log with logger='csv'"
)


def tensorboard_available() -> bool:
    """Whether the ``tensorboard`` package can be imported (``torch.utils.tensorboard`` needs it)."""
    return module_available("tensorboard")


def tensorboard_probe() -> str | None:
    """None when the TensorBoard logger can run here, else why not (the registry's probe)."""
    return None if tensorboard_available() else TENSORBOARD_MISSING
