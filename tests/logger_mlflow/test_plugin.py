"""logger-mlflow registers ``mlflow`` as a logger: listed without importing torch or mlflow, and conformant."""

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


def test_mlflow_is_registered_lazily_by_logger_mlflow() -> None:
    entry = plugin_host().registry("logger").resolve("mlflow")
    assert (entry.provider.distribution, entry.target) == ("logger-mlflow", "torchplug_mlflow.logger:MLFlowLogger")
    assert entry.probe == "torchplug_mlflow._vendor:probe"


def test_listing_shows_it_ok_and_imports_neither_torch_nor_mlflow() -> None:
    data = plugins_listing(dict(os.environ), {"torch", "mlflow"}, "--kind", "logger")
    assert entries_of(data, "logger-mlflow")[("logger", "mlflow")]["status"] == "ok"
    assert data["imported"] == []


def test_the_package_and_its_plugin_module_import_nothing_heavy() -> None:
    code = (
        "import sys, json, torchplug_mlflow, torchplug_mlflow._plugin, torchplug_mlflow._vendor\n"
        "torchplug_mlflow._vendor.probe(); torchplug_mlflow._vendor.report()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'mlflow'})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout) == []


class TestMLflowConformance(LoggerSuite):
    """The logger conformance suite (``core plugins verify mlflow``), on a sqlite store of its own."""

    plugin = "mlflow"

    @pytest.fixture
    def plugin_setup(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("mlflow")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
