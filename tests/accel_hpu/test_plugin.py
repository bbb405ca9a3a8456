"""Registration, the availability probe, and ``core plugins list`` with and without habana_frameworks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import torchplug
from tests.accel_hpu.fake import NOT_INSTALLED, subprocess_env
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug_hpu import _plugin, _vendor

NAMES = {
    ("accelerator", "hpu"): "torchplug_hpu.accelerator:HPUAccelerator",
    ("strategy", "hpu_single"): "torchplug_hpu.strategy:HPUSingleStrategy",
    ("strategy", "hpu_parallel"): "torchplug_hpu.strategy:HPUParallelStrategy",
    ("precision", "hpu-bf16-mixed"): "torchplug_hpu.precision:HPUPrecision",
    ("precision", "hpu-fp8"): "torchplug_hpu.precision:HPUPrecision",
}

HEAVY = {"torch", "habana_frameworks"}


def listing(fake: bool, *args: str) -> dict[str, Any]:
    """``core plugins list --json ARGS`` in a fresh interpreter, plus which heavy modules it imported."""
    return plugins_listing(subprocess_env(fake), HEAVY, *args)


def ours(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return entries_of(data, "accel-hpu")


def test_every_name_is_registered_lazily_by_accel_hpu() -> None:
    for (kind, name), target in NAMES.items():
        entry = torchplug.plugin_host().registry(kind).resolve(name)
        assert entry.target_path == target
        assert entry.provider.distribution == "accel-hpu" and entry.provider.version == "0.1.0"
        assert entry.probe == "torchplug_hpu._vendor:probe"
    precisions = torchplug.plugin_host().registry("precision")
    assert precisions.resolve("hpu-bf16-mixed").init_params == {"precision": "bf16-mixed"}
    assert precisions.resolve("hpu-fp8").init_params == {"precision": "fp8"}


def test_listing_shows_every_hpu_plugin_unavailable_without_habana_and_imports_no_torch() -> None:
    data = listing(fake=False)
    entries = ours(data)
    assert set(entries) == set(NAMES)
    for entry in entries.values():
        assert entry["status"] == "unavailable"
        assert entry["reason"] == NOT_INSTALLED
    assert data["imported"] == []  # neither torch nor habana_frameworks


def test_listing_with_habana_shows_them_ok_and_still_imports_neither() -> None:
    data = listing(fake=True)
    assert {e["status"] for e in ours(data).values()} == {"ok"}
    assert data["imported"] == []  # the probe looks for habana_frameworks without importing it


def test_check_imports_the_accelerator_and_counts_the_hpus() -> None:
    data = listing(True, "--check", "--kind", "accelerator")
    hpu = ours(data)[("accelerator", "hpu")]
    assert hpu["status"] == "ok"
    assert hpu["check"]["available"] is True and hpu["check"]["device_count"] == 8


def test_the_plugin_modules_import_nothing_heavy_even_with_habana_installed() -> None:
    code = (
        "import sys, torchplug_hpu, torchplug_hpu._plugin, torchplug_hpu._vendor\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {HEAVY!r}))"
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


def test_probe_looks_for_habana_without_importing_it(no_habana: None) -> None:
    assert _vendor.probe() == NOT_INSTALLED
    assert "habana_frameworks" not in sys.modules


def test_probe_is_satisfied_by_an_installed_habana(fake_habana: ModuleType) -> None:
    assert _vendor.probe() is None


def test_environment_report_without_habana(no_habana: None) -> None:
    report = _plugin.torchplug_environment_report()
    assert report["habana-torch-plugin"] is None and report["unavailable"] == NOT_INSTALLED


def test_environment_report_with_habana(fake_habana: ModuleType) -> None:
    report = _plugin.torchplug_environment_report()
    assert (report["devices"], report["device_name"], report["fp8"]) == (8, "GAUDI2", True)
    assert "unavailable" not in report


def test_environment_report_says_why_fp8_is_missing(refake: Callable[..., None]) -> None:
    refake(FAKE_HPU_NAME="GAUDI")
    assert "needs Gaudi2 or newer, but this HPU is a GAUDI" in _plugin.torchplug_environment_report()["fp8"]


def test_package_exports_are_lazy_and_versioned() -> None:
    import torchplug_hpu

    assert torchplug_hpu.__version__ == "0.1.0"
    assert torchplug_hpu.HPUParallelStrategy.__name__ == "HPUParallelStrategy"
    assert set(torchplug_hpu.__all__) <= set(dir(torchplug_hpu))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        torchplug_hpu.Nope  # noqa: B018
