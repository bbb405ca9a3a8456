"""accel-ipu's plugin module: registers the IPU plugins by dotted path; imports neither torch nor poptorch.

Every entry carries the same cheap probe, so ``core plugins list`` shows each as unavailable,
with the reason, where poptorch is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry

_PROBE: Final = "torchplug_ipu._vendor:probe"
_PRECISION: Final = "torchplug_ipu.precision:IPUPrecision"
_PRECISIONS: Final = {
    "ipu-32-true": ("32-true", "float32 on IPUs (what precision='32-true' means on an IPU)"),
    "ipu-16-mixed": ("16-mixed", "float32 master weights, float16 compute in a poptorch.autocast region"),
    "ipu-16-true": ("16-true", "float16 weights and compute on IPUs, with stochastic rounding"),
}


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "ipu",
        "torchplug_ipu.accelerator:IPUAccelerator",
        probe=_PROBE,
        description="Graphcore IPUs through poptorch; devices=N replicas (1, 2, 4...)",
    )


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register(
        "ipu",
        "torchplug_ipu.strategy:IPUStrategy",
        probe=_PROBE,
        description="Steps compiled by PopTorch; replication and gradient accumulation on the IPUs",
    )


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    for name, (precision, description) in _PRECISIONS.items():
        registry.register(name, _PRECISION, probe=_PROBE, description=description, precision=precision)


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_ipu._vendor import report

    return report()
