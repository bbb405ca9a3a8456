"""Checkpoint IO: how checkpoints are written, read and removed. The base class is torch-free."""

from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.utilities.imports import lazy_attributes

__all__ = [
    "AsyncCheckpointIO",
    "CheckpointIO",
    "DistributedCheckpointIO",
    "TorchCheckpointIO",
    "consolidate_checkpoint",
    "inspect_checkpoint",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "TorchCheckpointIO": "torchplug.io.torch_io",
        "AsyncCheckpointIO": "torchplug.io.async_io",
        "DistributedCheckpointIO": "torchplug.io.dcp_io",
        "consolidate_checkpoint": "torchplug.io._formats",
        "inspect_checkpoint": "torchplug.io._formats",
    },
    globals(),
)
