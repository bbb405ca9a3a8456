"""io-xla: the ``xla`` checkpoint IO for torchplug (``plugins=["xla"]``; the TPU accelerator's default).

Importing this package imports neither torch nor torch_xla; the class loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchplug_xla_io.checkpoint_io import XLACheckpointIO

__all__ = ["XLACheckpointIO", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("io-xla")
    if name != "XLACheckpointIO":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module("torchplug_xla_io.checkpoint_io").XLACheckpointIO
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
