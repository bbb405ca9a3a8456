"""The generic accelerator's torch-free side: its registry probe and the installed torch device backends.

``core plugins list`` imports this module for :func:`probe`, so it imports no torch: whether torch
has an accelerator is asked of torch only on use (``core plugins list --check``, the Trainer,
``accelerator="auto"``). The device backends that torch loads at ``import torch`` are read from
the ``torch.backends`` entry-point group's metadata.
"""

from __future__ import annotations

import importlib.metadata
from typing import Final

from torchplug.utilities.imports import distribution_version

__all__ = ["ENTRY_POINT_GROUP", "backend_entry_points", "probe"]

#: The entry-point group torch (2.5 and later) loads at ``import torch``: out-of-tree device backends.
ENTRY_POINT_GROUP: Final = "torch.backends"


def probe() -> str | None:
    """None when torch is installed (whether it has an accelerator is asked on use), else the reason."""
    if distribution_version("torch") is None:
        return "torch is not installed. Hint: pip install torch"
    return None


def backend_entry_points() -> list[str]:
    """The installed torch device backends, as ``"name (distribution version)"``, read without importing them."""
    found = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry_point.dist
        owner = f"{dist.metadata['Name']} {dist.version}" if dist is not None else entry_point.value
        found.append(f"{entry_point.name} ({owner})")
    return sorted(found)
