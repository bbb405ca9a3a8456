"""Callbacks: checkpointing, early stopping, learning-rate monitoring and the progress bar."""

from torchplug.callbacks.callback import Callback
from torchplug.utilities.imports import lazy_attributes

__all__ = ["Callback", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint", "ProgressBar"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "ModelCheckpoint": "torchplug.callbacks.model_checkpoint",
        "EarlyStopping": "torchplug.callbacks.early_stopping",
        "LearningRateMonitor": "torchplug.callbacks.lr_monitor",
        "ProgressBar": "torchplug.callbacks.progress",
    },
    globals(),
)
