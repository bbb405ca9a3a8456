"""Precision plugins: the numerics of training. The base class (``32-true``) is torch-free."""

from torchplug.precision.precision import Precision
from torchplug.utilities.imports import lazy_attributes

__all__ = [
    "ApexMixedPrecision",
    "DoublePrecision",
    "FullyShardedNativeMixedPrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "ShardedNativeMixedPrecision",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "DoublePrecision": "torchplug.precision.double",
        "HalfPrecision": "torchplug.precision.half",
        "MixedPrecision": "torchplug.precision.amp",
        # The old names of the original plugin documentation: thin aliases that build the native plugin.
        "ApexMixedPrecision": "torchplug.precision.legacy",
        "ShardedNativeMixedPrecision": "torchplug.precision.legacy",
        "FullyShardedNativeMixedPrecision": "torchplug.precision.legacy",
    },
    globals(),
)
