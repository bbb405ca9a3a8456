"""The plugin boundary's one question per kind: ``provide`` turns a name, a class or an instance into an object."""

from __future__ import annotations

import pytest

from torchplug import BrokenPluginError, MisconfigurationError, PluginUnavailableError, UnknownPluginError
from torchplug._boundary import Provided, provide
from torchplug._registry import Registry
from torchplug.accelerators.accelerator import Accelerator
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.io.torch_io import TorchCheckpointIO


class _Absent(CPUAccelerator):
    """An accelerator whose hardware is never there."""

    @staticmethod
    def is_available() -> bool:
        return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no absent device found"


@pytest.fixture
def accelerators() -> Registry[Accelerator]:
    registry = Registry("accelerator")
    registry.register("cpu", CPUAccelerator, aliases=("host",))
    registry.register("absent", _Absent)
    return registry


def test_a_name_is_created_from_its_entry_and_the_choice_comes_back(accelerators: Registry[Accelerator]) -> None:
    provided = provide(accelerators, "host")
    assert isinstance(provided.instance, CPUAccelerator)
    assert (provided.given, provided.name, provided.requested) == ("name", "cpu", "cpu")
    assert provided.entry is accelerators.resolve("cpu") and provided.provider == provided.entry.provider


def test_a_class_is_instantiated_and_an_instance_handed_back(accelerators: Registry[Accelerator]) -> None:
    by_class = provide(accelerators, CPUAccelerator)
    assert isinstance(by_class.instance, CPUAccelerator) and (by_class.given, by_class.name) == (
        "class",
        "CPUAccelerator",
    )
    instance = CPUAccelerator()
    given = provide(accelerators, instance)
    assert given.instance is instance and given.given == "instance" and given.entry is None


def test_an_unavailable_name_is_refused_and_an_unavailable_instance_reported(
    accelerators: Registry[Accelerator],
) -> None:
    with pytest.raises(
        PluginUnavailableError,
        match=r"Accelerator 'absent' from user code .* cannot run on this machine: no absent",
    ):
        provide(accelerators, "absent")
    assert provide(accelerators, _Absent(), check_instance=True).unavailable == "no absent device found"
    assert provide(accelerators, _Absent()).unavailable is None  # not asked


def test_anything_else_is_refused_with_the_installed_names(accelerators: Registry[Accelerator]) -> None:
    with pytest.raises(MisconfigurationError, match=r"accelerator=3 has type int.*Installed: absent, cpu"):
        provide(accelerators, 3)


def test_rename_maps_the_registered_name_and_may_refuse_it(accelerators: Registry[Accelerator]) -> None:
    asked: list[str] = []

    def rename(name: str) -> str:
        asked.append(name)
        return "cpu"

    provided = provide(accelerators, "host", rename=rename)
    assert asked == ["cpu"] and provided.requested == "cpu" and provided.name == "cpu"
    renamed = provide(accelerators, "not-registered", rename=lambda name: "cpu")  # a name only the rename knows
    assert renamed.requested == "not-registered" and renamed.name == "cpu"
    with pytest.raises(UnknownPluginError, match="Unknown accelerator 'nowhere'"):
        provide(accelerators, "host", rename=lambda name: "nowhere")


def test_a_missing_default_falls_back_with_its_install_hint() -> None:
    registry = Registry("checkpoint_io")
    registry.register("torch", TorchCheckpointIO)
    provided: Provided[CheckpointIO] = provide(registry, None, default="xla", fallback="torch")
    assert isinstance(provided.instance, TorchCheckpointIO)
    assert (provided.missing, provided.hint, provided.default) == ("xla", "io-xla", "torch")
    assert provide(registry, None, default="torch", fallback="torch").missing is None


def test_the_default_is_looked_up_only_when_it_is_created() -> None:
    registry = Registry("checkpoint_io")
    registry.register("torch", TorchCheckpointIO)
    registry.register("broken", "tp_no_such_module:IO")
    given = TorchCheckpointIO()
    provided = provide(registry, given, default="broken")  # the default is not used: nothing fails
    assert provided.instance is given
    with pytest.raises(BrokenPluginError, match=r"Checkpoint IO 'broken' from user code .* is broken: ModuleNotFound"):
        provided.create_default()
    assert isinstance(provide(registry, given, default="torch").create_default(), TorchCheckpointIO)
    with pytest.raises(ValueError, match="was not asked for a default"):
        provide(registry, given).create_default()
