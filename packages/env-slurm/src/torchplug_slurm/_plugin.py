"""env-slurm's plugin module: registers the ``slurm`` cluster environment by dotted path; imports no torch.

``core plugins list`` imports this module, so it stays this small. The environment class is
imported when detection asks it (its module is torch-free too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_cluster_environments(registry: Registry) -> None:
    registry.register(
        "slurm",
        "torchplug_slurm.environment:SLURMEnvironment",
        description="SLURM tasks started by srun; checkpoint and scontrol requeue on SIGUSR1",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any] | None:
    from torchplug_slurm._vendor import environment_report

    return environment_report()
