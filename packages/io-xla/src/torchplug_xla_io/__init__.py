"""io-xla: the ``xla`` checkpoint IO for torchplug (``plugins=["xla"]``; the TPU accelerator's default).

Importing this package imports neither torch nor torch_xla; the class loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_xla_io.checkpoint_io import XLACheckpointIO

__all__ = ["XLACheckpointIO", "__version__"]

__getattr__, __dir__ = lazy_attributes(
    __name__, {"XLACheckpointIO": "torchplug_xla_io.checkpoint_io"}, globals(), distribution="io-xla"
)
