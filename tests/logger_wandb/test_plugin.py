"""logger-wandb registers ``wandb`` as a logger: listed without importing torch or wandb, and conformant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug import plugin_host
from torchplug.testing import LoggerSuite


def test_wandb_is_registered_lazily_by_logger_wandb() -> None:
    entry = plugin_host().registry("logger").resolve("wandb")
    assert (entry.provider.distribution, entry.target) == ("logger-wandb", "torchplug_wandb.logger:WandbLogger")
    assert entry.probe == "torchplug_wandb._vendor:probe"


def test_listing_shows_it_ok_and_imports_neither_torch_nor_wandb() -> None:
    data = plugins_listing(dict(os.environ), {"torch", "wandb"}, "--kind", "logger")
    assert entries_of(data, "logger-wandb")[("logger", "wandb")]["status"] == "ok"
    assert data["imported"] == []


def test_the_package_and_its_plugin_module_import_nothing_heavy() -> None:
    code = (
        "import sys, json, torchplug_wandb, torchplug_wandb._plugin, torchplug_wandb._vendor\n"
        "torchplug_wandb._vendor.probe(); torchplug_wandb._vendor.report()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'wandb'})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout) == []


class TestWandbConformance(LoggerSuite):
    """The logger conformance suite (``core plugins verify wandb``), in W&B offline mode."""

    plugin = "wandb"

    @pytest.fixture
    def plugin_setup(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("wandb")
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_SILENT", "true")
