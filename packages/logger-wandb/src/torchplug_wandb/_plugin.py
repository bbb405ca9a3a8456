"""logger-wandb's plugin module: registers the ``wandb`` logger by dotted path; imports neither torch nor wandb."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_loggers(registry: Registry) -> None:
    registry.register(
        "wandb",
        "torchplug_wandb.logger:WandbLogger",
        description="Weights & Biases runs under <default_root_dir>/wandb (WANDB_MODE=offline: no network)",
        probe="torchplug_wandb._vendor:probe",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_wandb._vendor import report

    return report()
