"""accel-hpu: Intel Gaudi HPUs for torchplug through habana_frameworks (``Trainer(accelerator="hpu")``).

Importing this package imports neither torch nor habana_frameworks; each class loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_hpu._vendor import HabanaUnavailableError
    from torchplug_hpu.accelerator import HPUAccelerator
    from torchplug_hpu.precision import HPUPrecision
    from torchplug_hpu.strategy import HPUParallelStrategy, HPUSingleStrategy

__all__ = [
    "HPUAccelerator",
    "HPUParallelStrategy",
    "HPUPrecision",
    "HPUSingleStrategy",
    "HabanaUnavailableError",
    "__version__",
]

_LAZY: Final = {
    "HPUAccelerator": "torchplug_hpu.accelerator",
    "HPUSingleStrategy": "torchplug_hpu.strategy",
    "HPUParallelStrategy": "torchplug_hpu.strategy",
    "HPUPrecision": "torchplug_hpu.precision",
    "HabanaUnavailableError": "torchplug_hpu._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="accel-hpu")
