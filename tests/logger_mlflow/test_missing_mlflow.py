"""Without mlflow (faked at the import boundary): every way in says what to install."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import torchplug
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug import PluginUnavailableError
from torchplug_mlflow import MLFlowLogger, MLflowUnavailableError, _vendor

NOT_INSTALLED = (
    "mlflow is not installed. Hint: pip install mlflow (or pip install 'logger-mlflow[mlflow]'; "
    "mlflow-skinny for the client alone)"
)

#: A child's ``sitecustomize``: mlflow cannot be found, as when it is not installed.
HIDE_MLFLOW = """
import sys


class _NoMLflow:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "mlflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoMLflow())
"""


@pytest.fixture
def no_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlflow cannot be imported: ``import mlflow`` raises ModuleNotFoundError, as when it is not installed."""
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # type: ignore[arg-type]


@pytest.mark.usefixtures("no_mlflow")
def test_the_probe_says_mlflow_is_not_installed() -> None:
    assert _vendor.probe() == NOT_INSTALLED
    assert _vendor.report()["unavailable"] == NOT_INSTALLED


@pytest.mark.usefixtures("no_mlflow")
def test_trainer_logger_mlflow_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(logger=["csv", "mlflow"], default_root_dir=str(tmp_path))
    assert str(info.value) == f"logger='mlflow' (logger-mlflow 0.1.0) cannot run here: {NOT_INSTALLED}"


@pytest.mark.usefixtures("no_mlflow")
def test_using_the_logger_raises_the_same_hint(tmp_path: Path) -> None:
    logger = MLFlowLogger(save_dir=tmp_path)  # creating it costs nothing: the run starts on first use
    with pytest.raises(MLflowUnavailableError) as info:
        logger.log_metrics({"loss": 1.0}, 0)
    assert str(info.value) == NOT_INSTALLED
    assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)


def test_listing_without_mlflow_shows_it_unavailable_and_imports_neither(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE_MLFLOW)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    data = plugins_listing(env, {"torch", "mlflow"}, "--kind", "logger")
    entry = entries_of(data, "logger-mlflow")[("logger", "mlflow")]
    assert (entry["status"], entry["reason"]) == ("unavailable", NOT_INSTALLED)
    assert data["imported"] == []
