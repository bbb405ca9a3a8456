"""The wheel: what it holds, and how it is cached between test runs."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import torch

from tests.device_ext_support import DEVICE_EXT_DIR, build_testdevice, source_digest


def test_a_second_build_reuses_the_cached_wheel(testdevice_wheel_path: Path) -> None:
    again = build_testdevice()

    assert again.path == testdevice_wheel_path
    assert not again.built
    record = json.loads((testdevice_wheel_path.parent / "build.json").read_text())
    assert record["torch"] == torch.__version__


def test_the_cache_entry_names_the_torch_the_interpreter_and_the_sources(testdevice_wheel_path: Path) -> None:
    entry = testdevice_wheel_path.parent.name

    assert entry.startswith(f"torch-{torch.__version__}-cpython-")
    assert entry.endswith(source_digest()[:16])


def test_the_wheel_holds_the_runtime_the_device_module_and_the_autoload_entry_point(
    testdevice_wheel_path: Path,
) -> None:
    with zipfile.ZipFile(testdevice_wheel_path) as wheel:
        names = wheel.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        entry_points_text = wheel.read(entry_points).decode()
        metadata_text = wheel.read(metadata).decode()

    assert any(n.startswith("torchplug_testdevice/_C.") and n.endswith(".so") for n in names)
    assert {"torchplug_testdevice/device.py", "torchplug_testdevice/distributed.py"} <= set(names)
    assert "torchplug_testdevice/py.typed" in names
    assert "[torch.backends]\ntpdev = torchplug_testdevice:load" in entry_points_text
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in metadata_text


def test_the_digest_follows_the_sources_and_ignores_build_leftovers(tmp_path: Path) -> None:
    copy = tmp_path / "device-ext"
    shutil.copytree(DEVICE_EXT_DIR, copy, ignore=shutil.ignore_patterns("build", "__pycache__"))
    assert source_digest(copy) == source_digest()

    (copy / "build").mkdir()
    (copy / "build" / "device.o").write_bytes(b"object code")
    assert source_digest(copy) == source_digest()

    with (copy / "csrc" / "ops.cpp").open("a") as source:
        source.write("\n// changed\n")
    assert source_digest(copy) != source_digest()
