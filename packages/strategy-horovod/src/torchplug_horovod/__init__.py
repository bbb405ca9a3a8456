"""strategy-horovod: Horovod for torchplug (``Trainer(strategy="horovod")`` under ``horovodrun``).

Importing this package imports neither torch nor horovod; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_horovod._vendor import HorovodUnavailableError
    from torchplug_horovod.environment import HorovodEnvironment
    from torchplug_horovod.strategy import HorovodStrategy

__all__ = ["HorovodEnvironment", "HorovodStrategy", "HorovodUnavailableError", "__version__"]

_LAZY: Final = {
    "HorovodStrategy": "torchplug_horovod.strategy",
    "HorovodEnvironment": "torchplug_horovod.environment",
    "HorovodUnavailableError": "torchplug_horovod._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="strategy-horovod")
