"""Registration, the availability probe, and ``core plugins list`` with and without poptorch."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

import torchplug
from tests.accel_ipu.fake import NOT_INSTALLED, subprocess_env
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug_ipu import _plugin, _vendor

NAMES = {
    ("accelerator", "ipu"): "torchplug_ipu.accelerator:IPUAccelerator",
    ("strategy", "ipu"): "torchplug_ipu.strategy:IPUStrategy",
    ("precision", "ipu-32-true"): "torchplug_ipu.precision:IPUPrecision",
    ("precision", "ipu-16-mixed"): "torchplug_ipu.precision:IPUPrecision",
    ("precision", "ipu-16-true"): "torchplug_ipu.precision:IPUPrecision",
}


def listing(fake: bool, *args: str) -> dict[str, Any]:
    """``core plugins list --json ARGS`` in a fresh interpreter, plus which heavy modules it imported."""
    return plugins_listing(subprocess_env(fake), {"torch", "poptorch"}, *args)


def ours(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return entries_of(data, "accel-ipu")


def test_every_name_is_registered_lazily_by_accel_ipu() -> None:
    for (kind, name), target in NAMES.items():
        entry = torchplug.plugin_host().registry(kind).resolve(name)
        assert entry.target_path == target
        assert entry.provider.distribution == "accel-ipu" and entry.provider.version == "0.1.0"
        assert entry.probe == "torchplug_ipu._vendor:probe"
    precisions = torchplug.plugin_host().registry("precision")
    assert {name: precisions.resolve(name).init_params for name in ("ipu-32-true", "ipu-16-mixed", "ipu-16-true")} == {
        "ipu-32-true": {"precision": "32-true"},
        "ipu-16-mixed": {"precision": "16-mixed"},
        "ipu-16-true": {"precision": "16-true"},
    }


def test_listing_shows_every_ipu_plugin_unavailable_without_poptorch_and_imports_no_torch() -> None:
    data = listing(fake=False)
    entries = ours(data)
    assert set(entries) == set(NAMES)
    for entry in entries.values():
        assert entry["status"] == "unavailable"
        assert entry["reason"] == NOT_INSTALLED
    assert data["imported"] == []  # neither torch nor poptorch


def test_listing_with_poptorch_shows_them_ok_and_still_imports_neither() -> None:
    data = listing(fake=True)
    assert {e["status"] for e in ours(data).values()} == {"ok"}
    assert data["imported"] == []  # the probe looks for poptorch without importing it


def test_check_imports_the_accelerator_and_counts_the_ipus() -> None:
    data = listing(True, "--check", "--kind", "accelerator")
    ipu = ours(data)[("accelerator", "ipu")]
    assert ipu["status"] == "ok"
    assert ipu["check"]["available"] is True and ipu["check"]["device_count"] == 4


def test_the_plugin_modules_import_nothing_heavy_even_with_poptorch_installed() -> None:
    code = (
        "import sys, torchplug_ipu, torchplug_ipu._plugin, torchplug_ipu._vendor\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'poptorch'}))"
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


def test_probe_looks_for_poptorch_without_importing_it(no_poptorch: None) -> None:
    assert _vendor.probe() == NOT_INSTALLED
    assert "poptorch" not in sys.modules


def test_probe_is_satisfied_by_an_installed_poptorch(fake_poptorch: ModuleType) -> None:
    assert _vendor.probe() is None


def test_environment_report_without_poptorch(no_poptorch: None) -> None:
    report = _plugin.torchplug_environment_report()
    assert report["poptorch"] is None and report["unavailable"] == NOT_INSTALLED


def test_environment_report_with_poptorch(fake_poptorch: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_IPU_COUNT", "16")
    report = _plugin.torchplug_environment_report()
    assert report["ipus"] == 16 and "unavailable" not in report


def test_package_exports_are_lazy_and_versioned() -> None:
    import torchplug_ipu

    assert torchplug_ipu.__version__ == "0.1.0"
    assert torchplug_ipu.IPUStrategy.__name__ == "IPUStrategy"
    assert set(torchplug_ipu.__all__) <= set(dir(torchplug_ipu))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        torchplug_ipu.Nope  # noqa: B018
