"""The shared registry: lazy targets, aliases, init params, providers, conflicts and errors."""

from __future__ import annotations

import re
import sys
import threading

import pytest

from torchplug import (
    BrokenPluginError,
    PluginConflictError,
    PluginTimeoutError,
    PluginUnavailableError,
    UnknownPluginError,
)
from torchplug._boundary import check_availabilities, check_availability, why_unavailable
from torchplug._registry import Provider, Registry
from torchplug.accelerators.accelerator import Accelerator
from torchplug.accelerators.cpu import CPUAccelerator


class _Host:
    """A minimal registry host: settings and discovery state without any plugin."""

    def __init__(self, prefer: dict[str, str] | None = None) -> None:
        self.prefer = prefer or {}
        self.provider: Provider | None = None
        self.failed: list[object] = []

    def ensure_loaded(self) -> None:
        pass

    def current_provider(self) -> Provider | None:
        return self.provider

    def failed_plugins(self) -> list[object]:
        return self.failed

    def preferred_provider(self, name: str) -> str | None:
        return self.prefer.get(name)


def _as(host: _Host, provider: Provider, registry: Registry, *args: object, **kwargs: object) -> None:
    host.provider = provider
    try:
        registry.register(*args, **kwargs)  # type: ignore[arg-type]
    finally:
        host.provider = None


VENDOR_A = Provider("xpu", "vendor-a", "1.0")
VENDOR_B = Provider("xpu", "vendor-b", "2.0")
CORE = Provider("builtin", "core", "0.1.0", builtin=True)


@pytest.fixture
def host() -> _Host:
    return _Host()


@pytest.fixture
def registry(host: _Host) -> Registry:
    return Registry("accelerator", host)


def test_lazy_target_is_imported_on_first_use(registry: Registry) -> None:
    sys.modules.pop("tp_lazy_never_imported", None)
    registry.register("lazy", "tp_lazy_never_imported:Nope", description="never loaded")
    assert "lazy" in registry
    assert "tp_lazy_never_imported" not in sys.modules
    assert not registry.resolve("lazy").is_loaded


def test_get_creates_a_new_instance_each_time(registry: Registry) -> None:
    registry.register("cpu", "torchplug.accelerators.cpu:CPUAccelerator")
    first, second = registry.get("cpu"), registry.get("cpu")
    assert isinstance(first, CPUAccelerator)
    assert first is not second


def test_class_objects_are_accepted(registry: Registry) -> None:
    registry.register("cpu", CPUAccelerator)
    assert registry.get_class("cpu") is CPUAccelerator


def test_decorator_form_registers_the_class(registry: Registry) -> None:
    @registry.register("decorated", description="via decorator")
    class Decorated(CPUAccelerator):
        pass

    assert registry.get_class("decorated") is Decorated
    assert registry.resolve("decorated").description == "via decorator"


def test_aliases_and_init_params(host: _Host) -> None:
    strategies = Registry("strategy", host)
    strategies.register(
        "one", "torchplug.strategies.single_device:SingleDeviceStrategy", aliases=("uno",), device="cpu"
    )
    strategy = strategies.get("UNO")
    assert strategy.root_device.type == "cpu"
    assert strategies.resolve("uno").name == "one"
    assert strategies.names() == ["one"]


def test_overrides_replace_init_params(host: _Host) -> None:
    ios = Registry("checkpoint_io", host)
    ios.register("durable", "torchplug.io.torch_io:TorchCheckpointIO", fsync=True)
    assert ios.get("durable").fsync is True
    assert ios.get("durable", fsync=False).fsync is False


def test_unknown_name_suggests_close_names_and_lists_installed(registry: Registry) -> None:
    registry.register("cpu", CPUAccelerator)
    registry.register("cpux", CPUAccelerator)
    with pytest.raises(UnknownPluginError) as info:
        registry.get("cpz")
    message = str(info.value)
    assert "Unknown accelerator 'cpz'." in message
    assert "Did you mean 'cpu'" in message
    assert "Installed: cpu, cpux." in message


@pytest.mark.parametrize(
    ("name", "package"),
    [("cuda", "accel-cuda"), ("gpu", "accel-cuda"), ("tpu", "accel-tpu"), ("ipu", "accel-ipu"), ("hpu", "accel-hpu")],
)
def test_unknown_first_party_name_says_what_to_install(registry: Registry, name: str, package: str) -> None:
    with pytest.raises(UnknownPluginError, match=f"Hint: pip install {package}"):
        registry.get(name)


def test_target_that_is_not_an_accelerator_is_broken_with_its_provider(host: _Host, registry: Registry) -> None:
    _as(host, VENDOR_A, registry, "xpu", "collections:OrderedDict")
    with pytest.raises(BrokenPluginError) as info:
        registry.get("xpu")
    assert "vendor-a 1.0" in str(info.value)
    assert "not a subclass of torchplug.accelerators.accelerator.Accelerator" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)


def test_target_that_fails_to_import_is_broken(host: _Host, registry: Registry) -> None:
    _as(host, VENDOR_A, registry, "xpu", "tp_missing_vendor_module:XPU")
    with pytest.raises(BrokenPluginError, match=r"vendor-a 1\.0 is broken: ModuleNotFoundError") as info:
        registry.get("xpu")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


class _Absent(Accelerator):
    """An accelerator whose hardware is never there."""

    @staticmethod
    def is_available() -> bool:
        return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no absent device found. Hint: pip install absent-runtime"

    @staticmethod
    def auto_device_count() -> int:
        return 0

    @staticmethod
    def parse_devices(devices: object) -> object:
        return devices

    @staticmethod
    def get_parallel_devices(devices: object) -> list:  # type: ignore[type-arg]
        return []

    def setup_device(self, device: object) -> None:
        pass

    def teardown(self) -> None:
        pass


def test_unavailable_class_says_why(registry: Registry) -> None:
    registry.register("absent", _Absent)
    with pytest.raises(PluginUnavailableError, match="cannot run on this machine: no absent device found"):
        registry.get("absent")
    assert isinstance(registry.get("absent", check_available=False), _Absent)


def test_same_provider_registering_twice_needs_override(registry: Registry) -> None:
    registry.register("cpu", CPUAccelerator)
    with pytest.raises(ValueError, match=r"already registered by user code.*override=True"):
        registry.register("cpu", CPUAccelerator)
    registry.register("cpu", "torchplug.accelerators.cpu:CPUAccelerator", override=True, description="new")
    assert [e.description for e in registry.entries()] == ["new"]


def test_two_distributions_are_a_conflict_never_a_silent_winner(host: _Host, registry: Registry) -> None:
    _as(host, VENDOR_A, registry, "xpu", CPUAccelerator)
    _as(host, VENDOR_B, registry, "xpu", CPUAccelerator)
    with pytest.raises(PluginConflictError) as info:
        registry.get("xpu")
    message = str(info.value)
    assert "provided by 2 distributions: vendor-a 1.0, vendor-b 2.0" in message
    assert "'xpu@vendor-a'" in message
    assert "TORCHPLUG_PREFER=xpu=vendor-a" in message
    assert "TORCHPLUG_BLOCK_PLUGINS=vendor-b" in message
    assert registry.resolve("xpu@vendor-b").provider == VENDOR_B
    assert registry.resolve("xpu@Vendor_A").provider == VENDOR_A  # any spelling of the distribution


def test_prefer_setting_picks_a_provider(registry: Registry, host: _Host) -> None:
    _as(host, VENDOR_A, registry, "xpu", CPUAccelerator)
    _as(host, VENDOR_B, registry, "xpu", CPUAccelerator)
    host.prefer["xpu"] = "vendor-b"
    resolution = registry.resolution("xpu")
    assert resolution.winner is not None and resolution.winner.provider == VENDOR_B
    assert resolution.rule == "TORCHPLUG_PREFER=xpu=vendor-b"


def test_the_builtin_keeps_its_name_against_a_plugin(registry: Registry, host: _Host) -> None:
    _as(host, VENDOR_A, registry, "cpu", CPUAccelerator, description="vendor's cpu")
    _as(host, CORE, registry, "cpu", CPUAccelerator, description="core's cpu")
    assert registry.resolve("cpu").provider == CORE
    assert registry.resolve("cpu@vendor-a").description == "vendor's cpu"


def test_user_override_wins_over_plugins(registry: Registry, host: _Host) -> None:
    _as(host, VENDOR_A, registry, "xpu", CPUAccelerator)
    with pytest.raises(ValueError, match=r"already registered by vendor-a 1\.0"):
        registry.register("xpu", CPUAccelerator)
    registry.register("xpu", CPUAccelerator, override=True, description="mine")
    assert registry.resolve("xpu").description == "mine"
    assert registry.resolve("xpu@vendor-a").provider == VENDOR_A


def test_unknown_qualified_provider_lists_the_choices(registry: Registry, host: _Host) -> None:
    _as(host, VENDOR_A, registry, "xpu", CPUAccelerator)
    expected = r"No provider 'vendor-z' for accelerator 'xpu'\. Choices: xpu@vendor-a"
    with pytest.raises(UnknownPluginError, match=expected):
        registry.resolve("xpu@vendor-z")


@pytest.mark.parametrize("bad", ["", "has space", "-leading", "a/b", "cpu\n", "cpu\x1b[2J"])
def test_invalid_names_are_rejected(registry: Registry, bad: str) -> None:
    with pytest.raises(ValueError, match="Invalid registry name"):
        registry.register(bad, CPUAccelerator)


@pytest.mark.parametrize("bad", ["no_colon", "mod:", 42, "mod:Class\n"])
def test_invalid_targets_are_rejected(registry: Registry, bad: object) -> None:
    with pytest.raises(TypeError, match="'module:Class' paths or classes"):
        registry.register("x", bad)  # type: ignore[arg-type]


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="Unknown plugin kind 'accelerators'"):
        Registry("accelerators")


# -- availability at the plugin boundary --------------------------------------------------------


class _Raising(CPUAccelerator):
    @staticmethod
    def is_available() -> bool:
        raise RuntimeError("driver handshake failed")


class _Blocking(CPUAccelerator):
    release = threading.Event()

    @staticmethod
    def is_available() -> bool:
        _Blocking.release.wait(30)
        return True


def test_is_available_that_raises_is_a_torchplug_error_naming_the_provider(host: _Host, registry: Registry) -> None:
    _as(host, VENDOR_A, registry, "raising", _Raising)
    entry = registry.resolve("raising")
    expected = "Accelerator 'raising' from vendor-a 1.0: is_available() raised RuntimeError: driver handshake failed"
    with pytest.raises(BrokenPluginError) as info:
        check_availability(entry)
    assert str(info.value) == expected
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(BrokenPluginError, match=re.escape(expected)):
        registry.get("raising")
    with pytest.raises(BrokenPluginError, match="_Raising: is_available\\(\\) raised RuntimeError"):
        why_unavailable(_Raising)


def test_is_available_that_blocks_is_left_behind_at_the_deadline(
    host: _Host, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHPLUG_PLUGIN_TIMEOUT", "0.2")
    _as(host, VENDOR_A, registry, "blocking", _Blocking)
    _as(host, VENDOR_B, registry, "raising", _Raising)
    try:
        results = check_availabilities([registry.resolve("blocking"), registry.resolve("raising")])
    finally:
        _Blocking.release.set()
    assert isinstance(results[0], PluginTimeoutError)
    assert str(results[0]).startswith(
        "Accelerator 'blocking' from vendor-a 1.0 did not finish running is_available() within 0.2 s "
        "(TORCHPLUG_PLUGIN_TIMEOUT=0.2). Hint: "
    )
    assert isinstance(results[1], BrokenPluginError)  # the next plugin is still asked


def test_the_cores_own_entries_are_asked_in_this_thread(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    class _Here(CPUAccelerator):
        @staticmethod
        def is_available() -> bool:
            seen.append(threading.current_thread().name)
            return True

    registry.register("here", _Here)
    entry = registry.resolve("here")
    monkeypatch.setattr(entry, "provider", Provider("builtin", "core", "0.1.0", builtin=True))
    assert check_availability(entry) is None
    assert seen == [threading.current_thread().name]


def test_a_probe_that_says_no_spares_the_import(host: _Host, registry: Registry) -> None:
    _as(host, VENDOR_A, registry, "probed", "tp_test_never_imported:Accelerator", probe=lambda: "no device here")
    entry = registry.resolve("probed")
    assert check_availability(entry) == "no device here"
    assert not entry.is_loaded
