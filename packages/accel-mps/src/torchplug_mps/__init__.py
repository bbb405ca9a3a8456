"""accel-mps: Apple GPUs for torchplug, as ``Trainer(accelerator="mps")``, through ``torch.mps``.

Importing this package imports no torch; each public name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_mps._vendor import mps_unavailable_reason
    from torchplug_mps.accelerator import MPSAccelerator

__all__ = ["MPSAccelerator", "__version__", "mps_unavailable_reason"]

_LAZY = {
    "MPSAccelerator": "torchplug_mps.accelerator",
    "mps_unavailable_reason": "torchplug_mps._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="accel-mps")
