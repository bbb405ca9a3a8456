"""The user API: ``Module`` (the model and its steps) and ``DataModule`` (the data)."""

from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module

__all__ = ["DataModule", "Module"]
