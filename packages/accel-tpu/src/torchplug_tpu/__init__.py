"""accel-tpu: TPUs for torchplug through torch_xla (``Trainer(accelerator="tpu")``).

Importing this package imports neither torch nor torch_xla; each class loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from torchplug_tpu._xla import TorchXLAUnavailableError
    from torchplug_tpu.accelerator import XLAAccelerator
    from torchplug_tpu.environment import XLAEnvironment
    from torchplug_tpu.launcher import XLALauncher
    from torchplug_tpu.precision import XLAPrecision
    from torchplug_tpu.single_xla import SingleXLAStrategy
    from torchplug_tpu.xla import XLAStrategy

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
    "XLAStrategy": "torchplug_tpu.xla",
    "SingleXLAStrategy": "torchplug_tpu.single_xla",
    "XLAPrecision": "torchplug_tpu.precision",
    "XLAEnvironment": "torchplug_tpu.environment",
    "XLALauncher": "torchplug_tpu.launcher",
    "TorchXLAUnavailableError": "torchplug_tpu._xla",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("accel-tpu")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
