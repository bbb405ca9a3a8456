"""Without horovod (hidden at the import boundary): every way in names the reason and the alternatives."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import torchplug
from tests.core.cli.conftest import REPO_ROOT, TINY
from tests.core.strategies.runner import environment, run
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug import PluginUnavailableError
from torchplug_horovod import HorovodStrategy, HorovodUnavailableError, _vendor

#: A child's ``sitecustomize``: horovod cannot be found, as when it is not installed.
HIDE_HOROVOD = """
import sys


class _NoHorovod:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "horovod":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoHorovod())
"""


def hidden_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(HIDE_HOROVOD)
    return environment(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_ROOT)]))


def test_the_reason_names_the_build_failure_and_the_alternatives() -> None:
    reason = _vendor.NOT_INSTALLED
    assert "horovod is not installed" in reason
    assert "torch's headers need C++17" in reason and "tools/build_horovod.py" in reason
    assert "strategy='ddp' started by torchrun" in reason and "plugins=['mpi']" in reason


@pytest.mark.usefixtures("no_horovod")
def test_trainer_strategy_horovod_raises_the_reason() -> None:
    assert HorovodStrategy.is_available() is False
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(accelerator="cpu", strategy="horovod")
    assert str(info.value) == (
        f"Strategy 'horovod' from strategy-horovod 0.1.0 is installed but cannot run on this machine: "
        f"{_vendor.NOT_INSTALLED}"
    )
    with pytest.raises(HorovodUnavailableError, match="horovod is not installed"):
        _vendor.hvd()


def test_core_fit_exits_2_with_the_reason_and_no_traceback(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "torchplug",
        "fit",
        f"--model={TINY}.TinyModel",
        f"--data={TINY}.TinyData",
        "--trainer.strategy=horovod",
    ]
    result = run(command, tmp_path / "output.log", cwd=REPO_ROOT, env=hidden_env(tmp_path), timeout=120)
    assert result.returncode == 2, result.tail()
    assert "core fit: error: --trainer.strategy: Strategy 'horovod' from strategy-horovod 0.1.0" in result.output
    assert _vendor.NOT_INSTALLED in result.output
    assert "Traceback" not in result.output


def test_listing_shows_horovod_unavailable_with_the_reason(tmp_path: Path) -> None:
    data = plugins_listing(hidden_env(tmp_path), {"torch", "horovod"})
    entries = entries_of(data, "strategy-horovod")
    assert set(entries) == {("strategy", "horovod"), ("cluster_environment", "horovod")}
    for entry in entries.values():
        assert (entry["status"], entry["reason"]) == ("unavailable", _vendor.NOT_INSTALLED)
    assert data["imported"] == []
