"""Without wandb (faked at the import boundary): every way in says what to install."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import torchplug
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug import PluginUnavailableError
from torchplug_wandb import WandbLogger, WandbUnavailableError, _vendor

NOT_INSTALLED = "wandb is not installed. Hint: pip install wandb (or pip install 'logger-wandb[wandb]')"

#: A child's ``sitecustomize``: wandb cannot be found, as when it is not installed.
HIDE_WANDB = """
import sys


class _NoWandb:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "wandb":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoWandb())
"""


@pytest.fixture
def no_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb cannot be imported: ``import wandb`` raises ModuleNotFoundError, as when it is not installed."""
    for name in [m for m in sys.modules if m == "wandb" or m.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)  # type: ignore[arg-type]


@pytest.mark.usefixtures("no_wandb")
def test_the_probe_says_wandb_is_not_installed() -> None:
    assert _vendor.probe() == NOT_INSTALLED
    assert _vendor.report()["unavailable"] == NOT_INSTALLED


@pytest.mark.usefixtures("no_wandb")
def test_trainer_logger_wandb_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(logger=["csv", "wandb"], default_root_dir=str(tmp_path))
    assert str(info.value) == f"logger='wandb' (logger-wandb 0.1.0) cannot run here: {NOT_INSTALLED}"


@pytest.mark.usefixtures("no_wandb")
def test_creating_the_logger_raises_the_same_hint(tmp_path: Path) -> None:
    with pytest.raises(WandbUnavailableError) as info:
        WandbLogger(save_dir=tmp_path)  # refused when created, before any run
    assert str(info.value) == f"WandbLogger needs wandb: {NOT_INSTALLED}"
    assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)


def test_listing_without_wandb_shows_it_unavailable_and_imports_neither(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE_WANDB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    data = plugins_listing(env, {"torch", "wandb"}, "--kind", "logger")
    entry = entries_of(data, "logger-wandb")[("logger", "wandb")]
    assert (entry["status"], entry["reason"]) == ("unavailable", NOT_INSTALLED)
    assert data["imported"] == []
