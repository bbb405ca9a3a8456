"""accel-tpu: TPUs for torchplug through torch_xla (``Trainer(accelerator="tpu")``).

Importing this package imports neither torch nor torch_xla; each class loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_tpu._launcher import XLALauncher
    from torchplug_tpu._vendor import TorchXLAUnavailableError
    from torchplug_tpu.accelerator import XLAAccelerator
    from torchplug_tpu.environment import XLAEnvironment
    from torchplug_tpu.precision import XLAPrecision
    from torchplug_tpu.strategy import SingleXLAStrategy, XLAStrategy

__all__ = [
    "SingleXLAStrategy",
    "TorchXLAUnavailableError",
    "XLAAccelerator",
    "XLAEnvironment",
    "XLALauncher",
    "XLAPrecision",
    "XLAStrategy",
    "__version__",
]

_LAZY: Final = {
    "XLAAccelerator": "torchplug_tpu.accelerator",
    "XLAStrategy": "torchplug_tpu.strategy",
    "SingleXLAStrategy": "torchplug_tpu.strategy",
    "XLAPrecision": "torchplug_tpu.precision",
    "XLAEnvironment": "torchplug_tpu.environment",
    "XLALauncher": "torchplug_tpu._launcher",
    "TorchXLAUnavailableError": "torchplug_tpu._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="accel-tpu")
