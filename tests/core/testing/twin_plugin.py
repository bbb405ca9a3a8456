"""Registers an accelerator named like broken_plugin's checkpoint IO ('in_place'): one name, two kinds."""

from __future__ import annotations

from torchplug import Registry, hookimpl


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register("in_place", "torchplug.accelerators.cpu:CPUAccelerator", description="a name of two kinds")
