"""Checkpoint IO: how checkpoints are written, read and removed. The base class is torch-free."""

from torchplug._lazy import lazy_attributes
from torchplug.io.checkpoint_io import CheckpointIO

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"TorchCheckpointIO": "torchplug.io.torch_io", "AsyncCheckpointIO": "torchplug.io.async_io"},
    globals(),
)
