"""Strategies: how the model is spread over devices and processes. The bases are torch-free."""

from torchplug.strategies.launcher import Launcher
from torchplug.strategies.strategy import Strategy
from torchplug.utilities.imports import lazy_attributes

__all__ = [
    "DDP2Strategy",
    "DDPFullyShardedStrategy",
    "DDPShardedStrategy",
    "DDPSpawnShardedStrategy",
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "Launcher",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "Strategy",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "SingleDeviceStrategy": "torchplug.strategies.single_device",
        "ParallelStrategy": "torchplug.strategies.parallel",
        "DDPStrategy": "torchplug.strategies.ddp",
        "FSDPStrategy": "torchplug.strategies.fsdp",
        # Not provided; creating one raises, naming the replacement.
        "DDP2Strategy": "torchplug.strategies.removed",
        "DataParallelStrategy": "torchplug.strategies.removed",
        "DDPShardedStrategy": "torchplug.strategies.removed",
        "DDPSpawnShardedStrategy": "torchplug.strategies.removed",
        "DDPFullyShardedStrategy": "torchplug.strategies.removed",
    },
    globals(),
)
