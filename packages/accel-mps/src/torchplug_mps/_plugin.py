"""accel-mps's plugin module: registers the ``mps`` accelerator by dotted path; imports no torch.

The ``probe`` answers "can MPS run here?" from the operating system alone, so ``core plugins list``
shows ``mps`` as unavailable, with the reason, on Linux and Windows without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "mps",
        "torchplug_mps.accelerator:MPSAccelerator",
        description="Apple GPUs through torch.mps (Metal); one device; autocast on 'mps'",
        probe="torchplug_mps._vendor:probe",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_mps._vendor import environment_report

    return environment_report()
