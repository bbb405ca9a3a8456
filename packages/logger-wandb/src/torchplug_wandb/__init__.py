"""logger-wandb: the Weights & Biases logger for torchplug (``Trainer(logger="wandb")`` or ``WandbLogger(...)``).

Importing this package imports neither torch nor wandb; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_wandb._vendor import WandbUnavailableError
    from torchplug_wandb.logger import WandbLogger

__all__ = ["WandbLogger", "WandbUnavailableError", "__version__"]

_LAZY: Final = {
    "WandbLogger": "torchplug_wandb.logger",
    "WandbUnavailableError": "torchplug_wandb._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="logger-wandb")
