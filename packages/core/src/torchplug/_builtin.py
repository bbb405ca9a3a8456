"""The core's own plugins, registered through the same hooks as every third-party plugin.

Like any plugin module, this one imports nothing heavy: it registers dotted paths only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.hookspecs import hookimpl

if TYPE_CHECKING:
    from torchplug._registry import Registry


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register("cpu", "torchplug.accelerators.cpu:CPUAccelerator",
                      description="The CPU; devices=N runs N processes")


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register("single_device", "torchplug.strategies.single_device:SingleDeviceStrategy",
                      description="One process on one device")


@hookimpl
def torchplug_register_precisions(registry: Registry) -> None:
    registry.register("32-true", "torchplug.precision.precision:Precision", aliases=("32",),
                      description="float32 weights and compute (the default)")


@hookimpl
def torchplug_register_checkpoint_io(registry: Registry) -> None:
    registry.register("torch", "torchplug.io.torch_io:TorchCheckpointIO",
                      description="torch.save/torch.load through fsspec, written atomically")


@hookimpl
def torchplug_register_cluster_environments(registry: Registry) -> None:
    registry.register("local", "torchplug.environments.local:LocalEnvironment",
                      description="This machine; ranks from torchplug's launchers or LOCAL_RANK")
