"""Callbacks: checkpointing, early stopping, learning-rate monitoring and the progress bar."""

from torchplug._lazy import lazy_attributes
from torchplug.callbacks.callback import Callback

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
