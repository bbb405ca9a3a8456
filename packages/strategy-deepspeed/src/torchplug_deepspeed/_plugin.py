"""strategy-deepspeed's plugin module: the DeepSpeed plugins by dotted path; imports neither torch nor deepspeed.

The strategy names are Lightning's. Every entry carries the same cheap probe, so ``core plugins
list`` shows each as unavailable, with the reason, where deepspeed is not installed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry

_PROBE: Final = "torchplug_deepspeed._vendor:probe"
_STRATEGY: Final = "torchplug_deepspeed.strategy:DeepSpeedStrategy"
_PRECISION: Final = "torchplug_deepspeed.precision:DeepSpeedPrecision"

#: name -> (description, init params), as Lightning registers them.
_STRATEGIES: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "deepspeed": ("DeepSpeed with its defaults: ZeRO stage 2", {}),
    "deepspeed_stage_1": ("DeepSpeed ZeRO stage 1: optimizer state partitioned", {"stage": 1}),
    "deepspeed_stage_2": ("DeepSpeed ZeRO stage 2: optimizer state and gradients partitioned", {"stage": 2}),
    "deepspeed_stage_2_offload": (
        "DeepSpeed ZeRO stage 2, optimizer state and step offloaded to the CPU",
        {"stage": 2, "offload_optimizer": True},
    ),
    "deepspeed_stage_3": ("DeepSpeed ZeRO stage 3: parameters partitioned too", {"stage": 3}),
    "deepspeed_stage_3_offload": (
        "DeepSpeed ZeRO stage 3, optimizer and parameters offloaded to the CPU",
        {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
    ),
}

_PRECISIONS: Final = {
    "32-true": "float32 under DeepSpeed (what precision='32-true' means with a DeepSpeed strategy)",
    "bf16-mixed": "DeepSpeed's bf16 mode: bfloat16 model, float32 master weights in its optimizer",
    "16-mixed": "DeepSpeed's fp16 mode: float16 model, float32 master weights, dynamic loss scaling",
    "bf16-true": "DeepSpeed's bf16 mode, the module converted to bfloat16 up front",
    "16-true": "DeepSpeed's fp16 mode, the module converted to float16 up front",
}


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    for name, (description, params) in _STRATEGIES.items():
        registry.register(name, _STRATEGY, description=description, probe=_PROBE, **params)


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    for name, description in _PRECISIONS.items():
        registry.register(f"deepspeed-{name}", _PRECISION, description=description, probe=_PROBE, precision=name)


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_deepspeed._vendor import report

    return report()


@hookimpl
def torchplug_checkpoint_reader(path: str) -> str | None:
    """DeepSpeed's checkpoint directories (a ``latest`` file, or a ``checkpoint`` tag) for ``core checkpoint``."""
    if "://" in path or not os.path.isdir(path):
        return None
    if os.path.isfile(os.path.join(path, "latest")) or os.path.isdir(os.path.join(path, "checkpoint")):
        return "torchplug_deepspeed._checkpoint:consolidated_checkpoint"
    return None
