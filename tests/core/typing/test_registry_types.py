"""What type checkers see of the registries: each kind's registry is generic in its base class.

mypy checks this file (it is in the ``files`` of ``[tool.mypy]``): ``assert_type`` fails the type
check when a registry's types regress. Under pytest the same calls run, as a smoke test.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type

from torchplug import (
    Accelerator,
    CheckpointIO,
    ClusterEnvironment,
    PluginHost,
    Precision,
    Registry,
    RegistryEntry,
    Strategy,
)
from torchplug._settings import PluginSettings
from torchplug.accelerators.cpu import CPUAccelerator


def test_each_kind_has_a_registry_of_its_base_class() -> None:
    host = PluginHost(PluginSettings(autoload=False))
    assert_type(host.registry("accelerator"), Registry[Accelerator])
    assert_type(host.registry("strategy"), Registry[Strategy])
    assert_type(host.registry("precision"), Registry[Precision])
    assert_type(host.registry("checkpoint_io"), Registry[CheckpointIO])
    assert_type(host.registry("cluster_environment"), Registry[ClusterEnvironment])
    kind: str = "accelerator"
    assert_type(host.registry(kind), Registry[Any])  # a kind only known at run time


def test_lightning_registry_names_are_typed_too() -> None:
    import torchplug

    assert_type(torchplug.AcceleratorRegistry, Registry[Accelerator])
    assert_type(torchplug.ClusterEnvironmentRegistry, Registry[ClusterEnvironment])
    assert torchplug.StrategyRegistry.kind == "strategy"


def test_lookups_return_the_base_class() -> None:
    accelerators = PluginHost(PluginSettings(autoload=False)).registry("accelerator")
    assert_type(accelerators.get("cpu"), Accelerator)
    assert_type(accelerators.get_class("cpu"), type[Accelerator])
    entry = accelerators.resolve("cpu")
    assert_type(entry, RegistryEntry[Accelerator])
    assert_type(entry.create(), Accelerator)
    assert isinstance(accelerators.get("cpu"), CPUAccelerator)


def test_a_registry_built_for_a_kind_is_typed_by_it() -> None:
    assert_type(Registry("strategy"), Registry[Strategy])


def test_register_keeps_what_it_registers() -> None:
    registry = Registry("accelerator")

    @registry.register("mine", description="decorator form")
    class Mine(CPUAccelerator):
        pass

    assert_type(Mine, type[Mine])  # the decorator returns the class unchanged
    assert_type(registry.register("lazy", "torchplug.accelerators.cpu:CPUAccelerator"), str)
    assert_type(registry.register("direct", CPUAccelerator), type[Accelerator])
    assert registry.get_class("mine") is Mine
