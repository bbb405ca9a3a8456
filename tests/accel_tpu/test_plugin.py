"""Registration, the availability probe, and ``core plugins list`` with and without torch_xla."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import torchplug
from tests.accel_tpu.fake import NOT_INSTALLED, subprocess_env
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug_tpu import _plugin, _vendor

NAMES = {
    ("accelerator", "tpu"): "torchplug_tpu.accelerator:XLAAccelerator",
    ("strategy", "xla"): "torchplug_tpu.strategy:XLAStrategy",
    ("strategy", "single_xla"): "torchplug_tpu.strategy:SingleXLAStrategy",
    ("precision", "xla-32-true"): "torchplug_tpu.precision:XLAPrecision",
    ("precision", "xla-bf16-true"): "torchplug_tpu.precision:XLAPrecision",
    ("precision", "xla-16-true"): "torchplug_tpu.precision:XLAPrecision",
    ("precision", "xla-bf16-mixed"): "torchplug_tpu.precision:XLAPrecision",
    ("cluster_environment", "xla_runtime"): "torchplug_tpu.environment:XLAEnvironment",
}


def listing(fake: bool, *args: str) -> dict[str, Any]:
    """``core plugins list --json ARGS`` in a fresh interpreter, plus which heavy modules it imported."""
    return plugins_listing(subprocess_env(fake), {"torch", "torch_xla"}, *args)


def ours(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return entries_of(data, "accel-tpu")


def test_every_name_is_registered_lazily_by_accel_tpu() -> None:
    for (kind, name), target in NAMES.items():
        entry = torchplug.plugin_host().registry(kind).resolve(name)
        assert entry.target_path == target
        assert entry.provider.distribution == "accel-tpu" and entry.provider.version == "0.1.0"
    assert torchplug.plugin_host().registry("accelerator").resolve("xla").name == "tpu"  # the alias


def test_listing_shows_every_tpu_plugin_unavailable_without_torch_xla_and_imports_no_torch() -> None:
    data = listing(fake=False)
    entries = ours(data)
    assert set(entries) == set(NAMES)
    for entry in entries.values():
        assert entry["status"] == "unavailable"
        assert entry["reason"] == NOT_INSTALLED
    assert data["imported"] == []  # neither torch nor torch_xla
    io = next(e for e in data["entries"] if e["kind"] == "checkpoint_io" and e["name"] == "xla")
    assert io["status"] == "ok" and io["provider"]["distribution"] == "io-xla"


def test_listing_with_torch_xla_shows_them_ok_and_still_imports_neither() -> None:
    data = listing(fake=True)
    assert {e["status"] for e in ours(data).values()} == {"ok"}
    assert data["imported"] == []  # the probe looks for torch_xla without importing it


def test_check_imports_the_accelerator_and_counts_the_devices() -> None:
    data = listing(True, "--check", "--kind", "accelerator")
    tpu = ours(data)[("accelerator", "tpu")]
    assert tpu["status"] == "ok"
    assert tpu["check"]["available"] is True and tpu["check"]["device_count"] == 1


def test_the_plugin_modules_import_nothing_heavy_even_with_torch_xla_installed() -> None:
    code = (
        "import sys, torchplug_tpu, torchplug_tpu._plugin, torchplug_tpu._vendor, torchplug_tpu.environment, "
        "torchplug_xla_io, torchplug_xla_io._plugin\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'torch_xla'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(fake=True),
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_probe_looks_for_torch_xla_without_importing_it(no_xla: None) -> None:
    assert _vendor.probe() == NOT_INSTALLED


def test_probe_is_satisfied_by_an_installed_torch_xla(fake_xla: ModuleType) -> None:
    assert _vendor.probe() is None


def test_environment_report_without_torch_xla(no_xla: None) -> None:
    report = _plugin.torchplug_environment_report()
    assert report["torch_xla"] is None and report["unavailable"] == NOT_INSTALLED


def test_environment_report_with_torch_xla(fake_xla: ModuleType, fake_chips: Callable[[int], None]) -> None:
    fake_chips(4)
    report = _plugin.torchplug_environment_report()
    assert report["PJRT_DEVICE"] == "TPU" and report["devices"] == 4
    assert "unavailable" not in report


def test_package_exports_are_lazy_and_versioned() -> None:
    import torchplug_tpu
    import torchplug_xla_io

    assert torchplug_tpu.__version__ == "0.1.0" and torchplug_xla_io.__version__ == "0.1.0"
    assert torchplug_tpu.XLAAccelerator.__name__ == "XLAAccelerator"
    assert set(torchplug_tpu.__all__) <= set(dir(torchplug_tpu))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        torchplug_tpu.Nope  # noqa: B018
