"""accel-tpu's plugin module: registers the TPU plugins by dotted path; imports neither torch nor torch_xla.

Every entry carries the same cheap probe, so ``core plugins list`` shows each as unavailable,
with the reason, where torch_xla is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry

_PROBE: Final = "torchplug_tpu._vendor:probe"
_PRECISION: Final = "torchplug_tpu.precision:XLAPrecision"
_PRECISIONS: Final = {
    "xla-32-true": ("32-true", "float32 on XLA devices (what precision='32-true' means on a TPU)"),
    "xla-bf16-true": ("bf16-true", "bfloat16 weights and compute on XLA devices"),
    "xla-16-true": ("16-true", "float16 weights and compute on XLA devices"),
    "xla-bf16-mixed": ("bf16-mixed", "float32 weights, bfloat16 autocast on XLA devices"),
}


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "tpu",
        "torchplug_tpu.accelerator:XLAAccelerator",
        aliases=("xla",),
        probe=_PROBE,
        description="Google TPUs (and other XLA devices) through torch_xla",
    )


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register(
        "xla",
        "torchplug_tpu.strategy:XLAStrategy",
        probe=_PROBE,
        description="One process per XLA device, started by torch_xla's xmp.spawn",
    )
    registry.register(
        "single_xla",
        "torchplug_tpu.strategy:SingleXLAStrategy",
        probe=_PROBE,
        description="One XLA device in this process",
    )


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    for name, (precision, description) in _PRECISIONS.items():
        registry.register(name, _PRECISION, probe=_PROBE, description=description, precision=precision)


@hookimpl
def torchplug_register_cluster_environments(registry: Registry) -> None:
    registry.register(
        "xla_runtime",
        "torchplug_tpu.environment:XLAEnvironment",
        probe=_PROBE,
        description="Ranks from the torch_xla runtime (brought by the XLA strategies; never detected)",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_tpu._vendor import report

    return report()
