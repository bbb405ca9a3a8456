"""accel-hpu: Intel Gaudi HPUs for torchplug through habana_frameworks (``Trainer(accelerator="hpu")``).

Importing this package imports neither torch nor habana_frameworks; each class loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from torchplug_hpu._habana import HabanaUnavailableError
    from torchplug_hpu.accelerator import HPUAccelerator
    from torchplug_hpu.parallel import HPUParallelStrategy
    from torchplug_hpu.precision import HPUPrecision
    from torchplug_hpu.single import HPUSingleStrategy

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
    "HPUSingleStrategy": "torchplug_hpu.single",
    "HPUParallelStrategy": "torchplug_hpu.parallel",
    "HPUPrecision": "torchplug_hpu.precision",
    "HabanaUnavailableError": "torchplug_hpu._habana",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("accel-hpu")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
