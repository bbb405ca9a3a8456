"""The Tuner: find a learning rate (``lr_find``) and the largest batch size that fits (``scale_batch_size``)."""

from torchplug.utilities.imports import lazy_attributes

__all__ = ["LRFinder", "Tuner"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"LRFinder": "torchplug.tuner.lr_finder", "Tuner": "torchplug.tuner.tuning"},
    globals(),
)
