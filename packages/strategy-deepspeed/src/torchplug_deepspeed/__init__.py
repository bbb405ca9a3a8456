"""strategy-deepspeed: DeepSpeed ZeRO for torchplug (``Trainer(strategy="deepspeed_stage_3")``).

Importing this package imports neither torch nor deepspeed; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_deepspeed._checkpoint import consolidate, consolidated_checkpoint
    from torchplug_deepspeed._vendor import DeepSpeedUnavailableError
    from torchplug_deepspeed.precision import DeepSpeedPrecision
    from torchplug_deepspeed.strategy import DeepSpeedStrategy

__all__ = [
    "DeepSpeedPrecision",
    "DeepSpeedStrategy",
    "DeepSpeedUnavailableError",
    "__version__",
    "consolidate",
    "consolidated_checkpoint",
]

_LAZY: Final = {
    "DeepSpeedStrategy": "torchplug_deepspeed.strategy",
    "DeepSpeedPrecision": "torchplug_deepspeed.precision",
    "DeepSpeedUnavailableError": "torchplug_deepspeed._vendor",
    "consolidate": "torchplug_deepspeed._checkpoint",
    "consolidated_checkpoint": "torchplug_deepspeed._checkpoint",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="strategy-deepspeed")
