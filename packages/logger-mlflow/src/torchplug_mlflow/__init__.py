"""logger-mlflow: the MLflow logger for torchplug (``Trainer(logger="mlflow")`` or ``MLFlowLogger(...)``).

Importing this package imports neither torch nor mlflow; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_mlflow._vendor import MLflowUnavailableError
    from torchplug_mlflow.logger import MLFlowLogger

__all__ = ["MLFlowLogger", "MLflowUnavailableError", "__version__"]

_LAZY: Final = {
    "MLFlowLogger": "torchplug_mlflow.logger",
    "MLflowUnavailableError": "torchplug_mlflow._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="logger-mlflow")
