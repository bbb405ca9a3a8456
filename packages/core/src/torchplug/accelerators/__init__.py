"""Accelerators: kinds of hardware. The base class is torch-free; implementations load on first use."""

from torchplug.accelerators.accelerator import Accelerator
from torchplug.utilities.devices import parse_device_ids
from torchplug.utilities.imports import lazy_attributes

__all__ = ["Accelerator", "CPUAccelerator", "TorchDeviceAccelerator", "parse_device_ids"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"CPUAccelerator": "torchplug.accelerators.cpu", "TorchDeviceAccelerator": "torchplug.accelerators.torch_device"},
    globals(),
)
