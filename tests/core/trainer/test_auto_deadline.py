"""``accelerator="auto"`` asks every accelerator at the plugin boundary: one that blocks or raises is passed over."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from torchplug._host import PluginHost
from torchplug.trainer.connector import resolve

MakeDist = Callable[..., str]

#: A vendor package whose accelerator class blocks at import (until the test ends) or raises in is_available().
PLUGIN = """
def torchplug_register_accelerators(registry):
    registry.register("slowimport", "PREFIX_slow:SlowAccelerator")
    registry.register("raising", "PREFIX_raising:RaisingAccelerator")
"""
SLOW = """
import os, time
while not os.path.exists({release!r}):
    time.sleep(0.01)
from torchplug.accelerators.cpu import CPUAccelerator

class SlowAccelerator(CPUAccelerator):
    auto_priority = 70
"""
RAISING = """
from torchplug.accelerators.cpu import CPUAccelerator

class RaisingAccelerator(CPUAccelerator):
    auto_priority = 60

    @staticmethod
    def is_available():
        raise RuntimeError("no answer from the device")
"""


def test_auto_passes_over_accelerators_that_block_at_import_or_raise(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    make_dist(
        "vendor-auto",
        entry_points={"auto": "PREFIX_plugin"},
        modules={"PREFIX_plugin": PLUGIN, "PREFIX_slow": SLOW.format(release=str(release)), "PREFIX_raising": RAISING},
    )
    monkeypatch.setenv("TORCHPLUG_PLUGIN_TIMEOUT", "0.3")
    try:
        resolution = resolve(accelerator="auto", host=new_host())
    finally:
        release.touch()
    assert type(resolution.strategy.accelerator).__name__ == "CPUAccelerator"
    for thread in threading.enumerate():  # the abandoned import finishes once released
        if thread.name == "torchplug-plugin-worker":
            thread.join(10)
