"""``ddp2``, ``dp`` and fairscale's sharded strategies: listed, and refused with the reason and the replacement."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import torchplug
from tests.core.cli.conftest import REPO_ROOT, cli_env
from torchplug.strategies import (
    DataParallelStrategy,
    DDP2Strategy,
    DDPFullyShardedStrategy,
    DDPShardedStrategy,
    DDPSpawnShardedStrategy,
)
from torchplug.strategies.removed import DDP2_REASON, DP_REASON, SHARDED_REASONS

REASONS = {"ddp2": DDP2_REASON, **SHARDED_REASONS}


def test_the_reasons_name_ddp() -> None:
    assert DDP2_REASON.startswith("strategy='ddp2' was removed from PyTorch Lightning in 1.7")
    assert "slower than DDP" in DDP2_REASON
    assert DDP2_REASON.endswith("Hint: use strategy='ddp' (one process per device, on every node).")
    assert DP_REASON.endswith("Hint: use strategy='ddp' (or 'ddp_notebook' in a notebook).")
    for name, reason in SHARDED_REASONS.items():
        assert reason.startswith(f"strategy={name!r} was fairscale's"), reason
        assert "Hint: use strategy='fsdp' (torch FSDP2)" in reason


@pytest.mark.parametrize("name", list(REASONS))
def test_asking_for_the_name_raises_the_reason(name: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(strategy=name, devices=2, accelerator="cpu")
    assert str(info.value) == REASONS[name]


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        (DDP2Strategy, DDP2_REASON),
        (DataParallelStrategy, DP_REASON),
        (DDPShardedStrategy, SHARDED_REASONS["ddp_sharded"]),
        (DDPSpawnShardedStrategy, SHARDED_REASONS["ddp_sharded_spawn"]),
        (DDPFullyShardedStrategy, SHARDED_REASONS["ddp_fully_sharded"]),
    ],
)
def test_the_class_raises_the_reason_too(cls: type, reason: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        cls()
    assert str(info.value) == reason
    with pytest.raises(torchplug.MisconfigurationError):
        torchplug.Trainer(strategy=cls, accelerator="cpu")


def test_dp_is_an_unknown_name_that_suggests_ddp() -> None:
    with pytest.raises(torchplug.UnknownPluginError, match=r"^Unknown strategy 'dp'. Did you mean 'ddp'"):
        torchplug.Trainer(strategy="dp", devices=2, accelerator="cpu")


def test_listed_as_unavailable_with_the_reason() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torchplug", "plugins", "list", "--kind", "strategy", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    entries = {e["name"]: e for e in json.loads(result.stdout)["entries"]}
    assert (entries["ddp2"]["status"], entries["ddp2"]["reason"]) == ("unavailable", DDP2_REASON)
    assert "dp" not in entries
    for name in SHARDED_REASONS:
        assert entries[name]["status"] == "unavailable"
        assert entries[name]["reason"].endswith("its sharding became torch's FSDP). Hint: use strategy='fsdp'.")


@pytest.mark.slow
def test_core_fit_exits_2_with_the_reason_and_no_traceback() -> None:
    config = REPO_ROOT / "examples" / "digits" / "config.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchplug",
            "fit",
            "--config",
            str(config),
            "--trainer.strategy=ddp2",
            "--trainer.devices=2",
            "--trainer.accelerator=cpu",
        ],
        cwd=REPO_ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert DDP2_REASON in result.stderr
