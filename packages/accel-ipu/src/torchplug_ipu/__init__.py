"""accel-ipu: Graphcore IPUs for torchplug through poptorch (``Trainer(accelerator="ipu")``).

Importing this package imports neither torch nor poptorch; each class loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_ipu._vendor import PoptorchUnavailableError
    from torchplug_ipu.accelerator import IPUAccelerator
    from torchplug_ipu.precision import IPUPrecision
    from torchplug_ipu.strategy import IPUStrategy

__all__ = [
    "IPUAccelerator",
    "IPUPrecision",
    "IPUStrategy",
    "PoptorchUnavailableError",
    "__version__",
]

_LAZY: Final = {
    "IPUAccelerator": "torchplug_ipu.accelerator",
    "IPUStrategy": "torchplug_ipu.strategy",
    "IPUPrecision": "torchplug_ipu.precision",
    "PoptorchUnavailableError": "torchplug_ipu._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="accel-ipu")
