"""accel-hpu's plugin module: registers the HPU plugins by dotted path; imports neither torch nor habana_frameworks.

Every entry carries the same cheap probe, so ``core plugins list`` shows each as unavailable,
with the reason, where habana_frameworks is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry

_PROBE: Final = "torchplug_hpu._vendor:probe"
_PRECISION: Final = "torchplug_hpu.precision:HPUPrecision"


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "hpu",
        "torchplug_hpu.accelerator:HPUAccelerator",
        probe=_PROBE,
        description="Intel Gaudi HPUs through habana_frameworks; HCCL between processes",
    )


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register(
        "hpu_single", "torchplug_hpu.strategy:HPUSingleStrategy", probe=_PROBE, description="One HPU in this process"
    )
    registry.register(
        "hpu_parallel",
        "torchplug_hpu.strategy:HPUParallelStrategy",
        probe=_PROBE,
        description="DistributedDataParallel over HCCL, one process per HPU",
    )


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    registry.register(
        "hpu-bf16-mixed",
        _PRECISION,
        probe=_PROBE,
        precision="bf16-mixed",
        description="float32 weights, bfloat16 autocast on HPUs (precision='bf16-mixed' on an HPU)",
    )
    registry.register(
        "hpu-fp8",
        _PRECISION,
        probe=_PROBE,
        precision="fp8",
        description="fp8 Linear layers through Intel Gaudi's transformer engine, bfloat16 elsewhere",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_hpu._vendor import report

    return report()
