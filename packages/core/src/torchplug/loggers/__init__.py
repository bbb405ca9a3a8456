"""Loggers: where metrics go. ``CSVLogger`` is built in; ``TensorBoardLogger`` needs tensorboard."""

from torchplug.loggers.logger import Logger
from torchplug.utilities.imports import lazy_attributes

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"CSVLogger": "torchplug.loggers.csv_logs", "TensorBoardLogger": "torchplug.loggers.tensorboard"},
    globals(),
)
