"""accel-cuda's plugin module: registers the ``cuda`` accelerator (alias ``gpu``) by dotted path.

Imports neither torch nor anything heavy: ``core plugins list`` imports every plugin module, and
the ``probe`` it registers answers "can CUDA run here?" from metadata and files alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "cuda",
        "torchplug_cuda.accelerator:CUDAAccelerator",
        description="NVIDIA GPUs; devices=N, [ids], '0,2' or -1; NCCL between processes",
        aliases=("gpu",),
        probe="torchplug_cuda._vendor:probe",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_cuda._vendor import environment_report

    return environment_report()
