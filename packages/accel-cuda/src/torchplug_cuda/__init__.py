"""accel-cuda: NVIDIA GPUs for torchplug, as ``Trainer(accelerator="cuda")`` (alias ``"gpu"``).

Importing this package imports no torch; each public name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_cuda._devices import cuda_unavailable_reason, is_cuda_available, num_cuda_devices, parse_cuda_devices
    from torchplug_cuda._stats import cuda_device_stats
    from torchplug_cuda._usable import find_usable_cuda_devices
    from torchplug_cuda.accelerator import CUDAAccelerator

__all__ = [
    "CUDAAccelerator",
    "__version__",
    "cuda_device_stats",
    "cuda_unavailable_reason",
    "find_usable_cuda_devices",
    "is_cuda_available",
    "num_cuda_devices",
    "parse_cuda_devices",
]

_LAZY = {
    "CUDAAccelerator": "torchplug_cuda.accelerator",
    "cuda_device_stats": "torchplug_cuda._stats",
    "cuda_unavailable_reason": "torchplug_cuda._devices",
    "find_usable_cuda_devices": "torchplug_cuda._usable",
    "is_cuda_available": "torchplug_cuda._devices",
    "num_cuda_devices": "torchplug_cuda._devices",
    "parse_cuda_devices": "torchplug_cuda._devices",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="accel-cuda")
