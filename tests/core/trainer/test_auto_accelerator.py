"""``accelerator="auto"``: every installed accelerator is a candidate; faults and ties are warned about.

An accelerator that works but finds no device here (``accel-cuda`` on a CPU machine) is the normal
case: it is listed and logged at the debug level, never warned about.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from typing import ClassVar

import pytest

import torchplug
from tests.core.cli.conftest import REPO_ROOT, cli_env
from tests.plugin_site_support import plugin_site
from torchplug._discovery import Provider
from torchplug._errors import PluginSettingsError
from torchplug._host import PluginHost
from torchplug._registry import Registry
from torchplug._settings import PluginSettings
from torchplug.accelerators.accelerator import Accelerator
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.trainer import auto_accelerator
from torchplug.trainer.auto_accelerator import AutoAcceleratorWarning, choose
from torchplug.trainer.connector import resolve


class _Host:
    """A registry host without discovery; ``provider`` is who registers next."""

    def __init__(self) -> None:
        self.provider: Provider | None = None

    def ensure_loaded(self) -> None:
        pass

    def current_provider(self) -> Provider | None:
        return self.provider

    def failed_plugins(self) -> list[object]:
        return []

    def preferred_provider(self, name: str) -> str | None:
        return None


CORE = Provider("builtin", "core", "0.1.0", builtin=True)
VENDOR_A = Provider("xpu", "vendor-a", "1.0")
VENDOR_B = Provider("xpu", "vendor-b", "2.0")


class Fast(CPUAccelerator):
    auto_priority: ClassVar[int] = 50


class Unavailable(CPUAccelerator):
    auto_priority: ClassVar[int] = 90

    @staticmethod
    def is_available() -> bool:
        return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no Acme card found. Hint: pip install acme-driver"


class Raising(CPUAccelerator):
    auto_priority: ClassVar[int] = 90

    @staticmethod
    def is_available() -> bool:
        raise RuntimeError("the driver crashed")


def _probe_raises() -> str | None:
    raise OSError("cannot read /sys/class/acme")


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    auto_accelerator._reset_warnings()
    yield
    auto_accelerator._reset_warnings()


@pytest.fixture
def host() -> _Host:
    return _Host()


@pytest.fixture
def registry(host: _Host) -> Registry[Accelerator]:
    registry: Registry[Accelerator] = Registry("accelerator", host)
    host.provider = CORE
    registry.register("cpu", "torchplug.accelerators.cpu:CPUAccelerator")
    registry.register(
        "torch",
        "torchplug.accelerators.torch_device:TorchDeviceAccelerator",
        probe="torchplug.accelerators._torch_backends:probe",
    )
    host.provider = None
    return registry


def _register(
    host: _Host, registry: Registry[Accelerator], provider: Provider, name: str, target: object, **kwargs: object
) -> None:
    host.provider = provider
    try:
        registry.register(name, target, **kwargs)  # type: ignore[call-overload]
    finally:
        host.provider = None


def _messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, AutoAcceleratorWarning)]


def test_every_faulty_candidate_is_warned_once_with_its_full_reason(
    host: _Host, registry: Registry[Accelerator]
) -> None:
    _register(host, registry, VENDOR_A, "absent", Unavailable)
    _register(host, registry, VENDOR_A, "crashing", Raising)
    _register(host, registry, VENDOR_A, "probing", Fast, probe=_probe_raises)
    _register(host, registry, VENDOR_A, "broken", "acme_missing_module:Accelerator")
    _register(host, registry, VENDOR_A, "shared", Fast)
    _register(host, registry, VENDOR_B, "shared", Fast)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = choose(registry)
        choose(registry)  # the same reasons again: nothing new to say
    messages = _messages(caught)

    assert choice.winner.name == "cpu"
    assert len(messages) == 4
    expected = [
        "accelerator='auto' skipped broken (vendor-a 1.0): broken: Accelerator 'broken' from vendor-a 1.0 is broken: "
        "ModuleNotFoundError: No module named 'acme_missing_module'",
        "accelerator='auto' skipped crashing (vendor-a 1.0): broken: Accelerator 'crashing' from vendor-a 1.0: "
        "is_available() raised RuntimeError: the driver crashed",
        "accelerator='auto' skipped probing (vendor-a 1.0): broken: Accelerator 'probing' from vendor-a 1.0: its "
        "availability probe raised OSError: cannot read /sys/class/acme",
        "accelerator='auto' skipped shared (vendor-a 1.0 and vendor-b 2.0): conflict: The accelerator name 'shared' "
        "is provided by 2 distributions",
    ]
    for message, start in zip(sorted(messages), expected):
        assert message.startswith(start), message
    assert "TORCHPLUG_PREFER=shared=vendor-a" in sorted(messages)[3]


def test_an_installed_accelerator_without_a_device_is_logged_not_warned(
    host: _Host, registry: Registry[Accelerator], caplog: pytest.LogCaptureFixture
) -> None:
    _register(host, registry, VENDOR_A, "absent", Unavailable)
    logger = auto_accelerator._log
    logger.addHandler(caplog.handler)  # the torchplug logger may not propagate to caplog's root handler
    try:
        with warnings.catch_warnings(record=True) as caught, caplog.at_level("DEBUG", logger=logger.name):
            warnings.simplefilter("always")
            choice = choose(registry)
    finally:
        logger.removeHandler(caplog.handler)

    assert choice.winner.name == "cpu"
    assert _messages(caught) == []
    # A set: where the logger also propagates to caplog's root handler, the one record is seen twice.
    assert {(r.levelname, r.getMessage()) for r in caplog.records if "absent" in r.getMessage()} == {
        (
            "DEBUG",
            "accelerator='auto' skipped absent (vendor-a 1.0): unavailable: no Acme card found. Hint: pip "
            "install acme-driver",
        )
    }
    assert "absent (vendor-a 1.0): skipped, unavailable: no Acme card found. Hint: pip install acme-driver" in (
        choice.details
    )


def test_the_generic_accelerator_with_nothing_to_serve_is_listed_not_warned(
    registry: Registry[Accelerator],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = choose(registry)

    assert _messages(caught) == []
    (detail,) = choice.details
    assert detail.startswith("torch (core 0.1.0, built-in): skipped, nothing to serve: torch reports no accelerator")


def test_a_tie_is_settled_by_name_and_told(host: _Host, registry: Registry[Accelerator]) -> None:
    _register(host, registry, VENDOR_A, "zeta", Fast)
    _register(host, registry, VENDOR_B, "alpha", Fast)

    with pytest.warns(AutoAcceleratorWarning) as caught:
        choice = choose(registry)

    assert choice.winner.name == "alpha"
    assert "tie with 'zeta' settled by name" in choice.why
    assert _messages(caught.list) == [
        "accelerator='auto': 'alpha' and 'zeta' are available with the same priority (50); chose 'alpha', the first "
        "by name. Hint: pass accelerator='zeta' to use the other, or set TORCHPLUG_ACCELERATOR_PRIORITY=zeta=51 to "
        "rank it first."
    ]
    assert "zeta (vendor-a 1.0): lost the tie at priority 50 (names settle ties alphabetically)" in choice.details


def test_the_priority_variable_changes_the_ranking(host: _Host, registry: Registry[Accelerator]) -> None:
    _register(host, registry, VENDOR_A, "zeta", Fast)
    _register(host, registry, VENDOR_B, "alpha", Fast)

    choice = choose(registry, {"TORCHPLUG_ACCELERATOR_PRIORITY": "zeta=51, cpu=-1"})

    assert choice.winner.name == "zeta"
    assert choice.why.startswith("accelerator='auto': highest priority available (51); also available: alpha (50), ")
    assert choice.why.endswith("priority set by TORCHPLUG_ACCELERATOR_PRIORITY")
    assert "alpha (vendor-b 2.0): lost, priority 50 < 51" in choice.details
    assert "cpu (core 0.1.0, built-in): lost, priority -1 < 51" in choice.details


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("zeta", "TORCHPLUG_ACCELERATOR_PRIORITY has the item 'zeta', which is not NAME=INT."),
        ("zeta=high", "TORCHPLUG_ACCELERATOR_PRIORITY has the item 'zeta=high', which is not NAME=INT."),
        ("=3", "TORCHPLUG_ACCELERATOR_PRIORITY has the item '=3', which is not NAME=INT."),
        (
            "cuda=60",
            "TORCHPLUG_ACCELERATOR_PRIORITY names 'cuda', which is not an installed accelerator. Installed: "
            "cpu, torch.",
        ),
    ],
)
def test_a_priority_variable_that_cannot_be_honoured_is_refused(
    registry: Registry[Accelerator], value: str, message: str
) -> None:
    with pytest.raises(PluginSettingsError) as info:
        choose(registry, {"TORCHPLUG_ACCELERATOR_PRIORITY": value})
    assert str(info.value).startswith(message)


def test_no_usable_accelerator_lists_every_reason(host: _Host) -> None:
    registry: Registry[Accelerator] = Registry("accelerator", host)
    _register(host, registry, VENDOR_A, "absent", Unavailable)

    with pytest.raises(torchplug.MisconfigurationError) as info:
        choose(registry)
    assert str(info.value) == (
        "accelerator='auto' found no usable accelerator (absent (vendor-a 1.0): unavailable: no Acme card found. "
        "Hint: pip install acme-driver)."
    )


def test_the_trainer_describes_every_candidate_and_warns_at_the_users_line() -> None:
    host = PluginHost(PluginSettings(autoload=False))
    host.registry("accelerator").register("absent", Unavailable, description="absent here")
    host.registry("accelerator").register("crashing", Raising, description="its driver crashes")

    with pytest.warns(AutoAcceleratorWarning, match="skipped crashing") as caught:
        resolution = resolve(host=host)
    text = resolution.describe()

    assert [str(w.message).split(":")[0] for w in caught.list] == [
        "accelerator='auto' skipped crashing (user code (registered at run time))"
    ]
    assert caught.list[0].filename == __file__
    assert re.search(r"^accelerator\s+cpu\s+\(accelerator='auto': highest priority available \(0\)", text, re.M)
    assert re.search(r"^\s+- absent \(user code.*\): skipped, unavailable: no Acme card found", text, re.M), text
    assert re.search(r"^\s+- torch \(core [\d.]+, built-in\): skipped, nothing to serve: torch reports no", text, re.M)
    decision = resolution.trace[0]
    assert [d.split(":")[0] for d in decision.details] == [
        "absent (user code (registered at run time))",
        "crashing (user code (registered at run time))",
        "torch (core 0.1.0, built-in)",
    ]


@pytest.mark.slow
def test_core_fit_lists_but_does_not_warn_about_an_installed_accelerator_without_a_device(tmp_path: object) -> None:
    import subprocess
    import sys

    site = plugin_site("torchplug-test-acme", "tests.core.trainer.auto_plugin")
    env = cli_env(TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD="1", TORCHPLUG_PLUGINS="torchplug-test-acme")
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    config = REPO_ROOT / "examples" / "digits" / "config.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "torchplug", "fit", "--config", str(config), "--resolve"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr  # accel-cuda on a CPU machine: the normal case
    assert "- acme (" in result.stdout and "skipped, unavailable: no Acme card found" in result.stdout
