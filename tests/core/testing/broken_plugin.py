"""A plugin module registering the faulty plugins of :mod:`tests.core.testing.broken` (name it in TORCHPLUG_PLUGINS)."""

from __future__ import annotations

from torchplug import Registry, hookimpl

_BROKEN = "tests.core.testing.broken"

ACCELERATORS = {
    "junk_devices": "JunkAcceptingAccelerator",
    "unquoted_devices": "UnquotedErrorsAccelerator",
    "raising_availability": "RaisingAvailabilityAccelerator",
    "pickled_rng": "PickledRngAccelerator",
}


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    for name, cls in ACCELERATORS.items():
        registry.register(name, f"{_BROKEN}:{cls}", description=f"faulty: {cls}")


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register("flat_gather", f"{_BROKEN}:FlatGatherStrategy", description="faulty: all_gather")


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    registry.register("object_state", f"{_BROKEN}:ObjectStatePrecision", description="faulty: state_dict")


@hookimpl
def torchplug_register_checkpoint_io(registry: Registry) -> None:
    registry.register("in_place", f"{_BROKEN}:InPlaceCheckpointIO", description="faulty: not atomic")


@hookimpl
def torchplug_register_cluster_environments(registry: Registry) -> None:
    registry.register(
        "writing_env",
        "tests.core.testing.broken_environment:WritingEnvironment",
        description="faulty: detection writes",
    )
