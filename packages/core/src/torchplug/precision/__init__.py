"""Precision plugins: the numerics of training. The base class (``32-true``) is torch-free."""

from torchplug.precision.precision import Precision
from torchplug.utilities.imports import lazy_attributes

__all__ = ["DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "DoublePrecision": "torchplug.precision.double",
        "HalfPrecision": "torchplug.precision.half",
        "MixedPrecision": "torchplug.precision.amp",
    },
    globals(),
)
