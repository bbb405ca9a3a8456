"""The Trainer and the machinery behind it (resolution, the run's collaborators, metrics, checkpoints).

``Trainer`` is loaded on first access, so that the loops, which use this package's run-level
modules (``states``, ``hooks``, ``data``...), never load the Trainer itself.
"""

from typing import TYPE_CHECKING

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["Trainer"]

__getattr__, __dir__ = lazy_attributes(__name__, {"Trainer": "torchplug.trainer.trainer"}, globals())
