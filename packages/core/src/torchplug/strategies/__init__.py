"""Strategies: how the model is spread over devices and processes. The bases are torch-free."""

from torchplug.strategies.launcher import Launcher
from torchplug.strategies.strategy import Strategy
from torchplug.utilities.imports import lazy_attributes

__all__ = ["DDPStrategy", "FSDPStrategy", "Launcher", "ParallelStrategy", "SingleDeviceStrategy", "Strategy"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "SingleDeviceStrategy": "torchplug.strategies.single_device",
        "ParallelStrategy": "torchplug.strategies.parallel",
        "DDPStrategy": "torchplug.strategies.ddp",
        "FSDPStrategy": "torchplug.strategies.fsdp",
    },
    globals(),
)
