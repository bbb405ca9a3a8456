"""logger-mlflow's plugin module: registers the ``mlflow`` logger by dotted path; imports neither torch nor mlflow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_loggers(registry: Registry) -> None:
    registry.register(
        "mlflow",
        "torchplug_mlflow.logger:MLFlowLogger",
        description="MLflow tracking: MLFLOW_TRACKING_URI, else sqlite under <default_root_dir>/mlruns",
        probe="torchplug_mlflow._vendor:probe",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_mlflow._vendor import report

    return report()
