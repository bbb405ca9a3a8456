"""Without deepspeed (faked at the import boundary): every way in says what to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torchplug
from tests.plugin_listing_support import entries_of, plugins_listing
from torchplug import PluginUnavailableError
from torchplug_deepspeed import DeepSpeedStrategy, DeepSpeedUnavailableError, _vendor, consolidated_checkpoint

#: A child's ``sitecustomize``: deepspeed cannot be found, as when it is not installed.
HIDE_DEEPSPEED = """
import sys


class _NoDeepSpeed:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "deepspeed":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoDeepSpeed())
"""

NOT_INSTALLED = (
    "deepspeed is not installed. Hint: pip install deepspeed (or pip install 'strategy-deepspeed[deepspeed]')"
)


@pytest.mark.usefixtures("no_deepspeed")
def test_the_probe_and_the_strategy_say_deepspeed_is_not_installed() -> None:
    assert _vendor.probe() == NOT_INSTALLED
    assert DeepSpeedStrategy.is_available() is False
    assert DeepSpeedStrategy.unavailable_reason() == NOT_INSTALLED


@pytest.mark.usefixtures("no_deepspeed")
@pytest.mark.parametrize("name", ["deepspeed", "deepspeed_stage_3", "deepspeed_stage_2_offload"])
def test_trainer_names_deepspeed_and_how_to_get_it(name: str) -> None:
    with pytest.raises(PluginUnavailableError) as info:
        torchplug.Trainer(accelerator="cpu", devices=2, strategy=name)
    assert str(info.value) == (
        f"Strategy {name!r} from strategy-deepspeed 0.1.0 is installed but cannot run on this machine: {NOT_INSTALLED}"
    )


@pytest.mark.usefixtures("no_deepspeed")
def test_using_deepspeed_raises_the_same_hint(tmp_path: Path) -> None:
    for use in (
        lambda: _vendor.import_deepspeed(),
        lambda: _vendor.use_accelerator("cpu"),
        lambda: consolidated_checkpoint(_fake_checkpoint(tmp_path)),
    ):
        with pytest.raises(DeepSpeedUnavailableError) as info:
            use()
        assert str(info.value) == NOT_INSTALLED
        assert isinstance(info.value, ImportError) and isinstance(info.value, PluginUnavailableError)


@pytest.mark.usefixtures("no_deepspeed")
def test_core_checkpoint_recognises_a_deepspeed_directory_and_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchplug.cli import main

    code = main(["checkpoint", "consolidate", str(_fake_checkpoint(tmp_path)), str(tmp_path / "one.ckpt")])
    assert code == 1
    assert (
        capsys.readouterr().err.strip()
        == f"core checkpoint consolidate: error: DeepSpeedUnavailableError: {NOT_INSTALLED}"
    )


def _fake_checkpoint(tmp_path: Path) -> Path:
    import torch

    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "latest").write_text("checkpoint")
    torch.save(
        {"ds_config": {"zero_optimization": {"stage": 2}}}, tmp_path / "checkpoint" / "mp_rank_00_model_states.pt"
    )
    return tmp_path


def test_listing_without_deepspeed_shows_every_name_unavailable_and_imports_neither(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE_DEEPSPEED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    data = plugins_listing(env, {"torch", "deepspeed"})
    entries = entries_of(data, "strategy-deepspeed")
    assert len(entries) == 11
    for entry in entries.values():
        assert (entry["status"], entry["reason"]) == ("unavailable", NOT_INSTALLED)
    assert data["imported"] == []


def test_listing_with_deepspeed_shows_them_ok_and_imports_neither() -> None:
    data = plugins_listing(dict(os.environ), {"torch", "deepspeed"})
    entries = entries_of(data, "strategy-deepspeed")
    assert {e["status"] for e in entries.values()} == {"ok"}
    assert data["imported"] == []  # the probe looks for deepspeed without importing it


def test_the_package_and_its_plugin_module_import_nothing_heavy() -> None:
    code = (
        "import sys, json, torchplug_deepspeed, torchplug_deepspeed._plugin, torchplug_deepspeed._vendor\n"
        "torchplug_deepspeed._vendor.probe()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'deepspeed'})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(result.stdout) == []
