"""accel-ipu: Graphcore IPUs for torchplug through poptorch (``Trainer(accelerator="ipu")``).

Importing this package imports neither torch nor poptorch; each class loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from torchplug_ipu._poptorch import PoptorchUnavailableError
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
    "PoptorchUnavailableError": "torchplug_ipu._poptorch",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("accel-ipu")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
