"""Horovod trains for real: ``horovodrun -np 2`` on Gloo, the core tests' model, compared with what DDP reaches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torchplug
from tests.core.strategies.runner import TRAIN, assert_close_states, environment, rank_records, reference_state, run
from torchplug import MisconfigurationError

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("horovod_installed")]

HOROVODRUN = Path(sys.executable).with_name("horovodrun")


def horovodrun(out: Path, *args: str) -> list[str]:
    return [
        str(HOROVODRUN),
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        sys.executable,
        str(TRAIN),
        "--out",
        str(out),
        *args,
    ]


def test_horovodrun_two_processes_reach_the_weights_ddp_reaches(tmp_path: Path) -> None:
    command = horovodrun(tmp_path, "--strategy", "horovod", "--devices", "auto", "--accumulate", "2", "--clip", "0.5")
    result = run(command, tmp_path / "output.log", env=environment())
    assert result.returncode == 0, result.tail()
    assert not result.leftovers
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    for rank, record in ranks.items():
        assert (record["global_rank"], record["world_size"]) == (rank, 2)
        assert record["environment"] == "HorovodEnvironment" and record["strategy"] == "HorovodStrategy()"
        assert record["global_step"] == 4  # 8 batches per rank over 2 epochs, accumulated by 2
    assert ranks[0]["hash"] == ranks[1]["hash"]  # replicas stay identical
    expected = reference_state(epochs=2, accumulate=2, clip=0.5)
    assert_close_states(torch.load(tmp_path / "rank0.pt"), expected)


def test_outside_horovodrun_the_strategy_says_how_to_start_it(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"started by horovodrun.*horovodrun -np 2 python train.py"):
        torchplug.Trainer(accelerator="cpu", devices=2, strategy="horovod", default_root_dir=tmp_path)
