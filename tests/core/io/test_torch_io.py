"""TorchCheckpointIO on real filesystems: round trips, safety of loading, and atomic saves (even under SIGKILL)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.checkpoint_io_support import Unpicklable, assert_last_complete, assert_same, kill_while_writing, listing

from torchplug._errors import CheckpointLoadError
from torchplug.io import TorchCheckpointIO


class Hyperparameters:
    """An arbitrary object: only a trusting load (``weights_only=False``) may unpickle it."""

    def __init__(self, lr: float) -> None:
        self.lr = lr


def make_checkpoint(seed: int = 0) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "state_dict": {"layer.weight": torch.randn(16, 8, generator=generator), "layer.bias": torch.zeros(16)},
        "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}],
        "epoch": 2,
        "global_step": 1234,
        "loss": 0.25,
        "nested": {"ints": [1, 2, 3], "tuple": (4, "five"), "empty": {}, "none": None},
    }


def test_round_trip_keeps_tensors_numbers_and_nesting(root: str) -> None:
    io = TorchCheckpointIO()
    checkpoint = make_checkpoint()
    io.save_checkpoint(checkpoint, f"{root}/epoch=2.ckpt")
    assert_same(io.load_checkpoint(f"{root}/epoch=2.ckpt"), checkpoint)
    assert io.exists(f"{root}/epoch=2.ckpt")
    assert listing(root) == ["epoch=2.ckpt"]  # no temporary file left behind


def test_saving_over_an_existing_checkpoint_replaces_it(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint(make_checkpoint(seed=1), f"{root}/last.ckpt")
    io.save_checkpoint(make_checkpoint(seed=2), f"{root}/last.ckpt")
    assert_same(io.load_checkpoint(f"{root}/last.ckpt"), make_checkpoint(seed=2))
    assert listing(root) == ["last.ckpt"]


def test_missing_parent_directories_are_created(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint(make_checkpoint(), f"{root}/run/version_0/checkpoints/last.ckpt")
    assert_same(io.load_checkpoint(f"{root}/run/version_0/checkpoints/last.ckpt"), make_checkpoint())


def test_load_refuses_arbitrary_objects_unless_trusted(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"hparams": Hyperparameters(lr=0.1)}, f"{root}/model.ckpt")
    with pytest.raises(CheckpointLoadError, match=r"holds Python objects that the safe loader does not run"):
        io.load_checkpoint(f"{root}/model.ckpt")  # weights_only=True is the default
    loaded = io.load_checkpoint(f"{root}/model.ckpt", weights_only=False)
    assert isinstance(loaded["hparams"], Hyperparameters) and loaded["hparams"].lr == 0.1


def test_load_of_a_missing_file_names_the_path(root: str) -> None:
    with pytest.raises(FileNotFoundError, match=r"Checkpoint file not found: .*nowhere\.ckpt"):
        TorchCheckpointIO().load_checkpoint(f"{root}/nowhere.ckpt")


def test_remove_deletes_and_is_a_no_op_when_missing(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint(make_checkpoint(), f"{root}/old.ckpt")
    io.remove_checkpoint(f"{root}/old.ckpt")
    assert not io.exists(f"{root}/old.ckpt")
    io.remove_checkpoint(f"{root}/old.ckpt")  # already gone: nothing happens


def test_storage_options_are_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"storage_options=\{'anon': True\} is not supported.*Hint:"):
        TorchCheckpointIO().save_checkpoint(make_checkpoint(), str(tmp_path / "x.ckpt"), storage_options={"anon": True})
    assert not (tmp_path / "x.ckpt").exists()


def test_a_save_that_fails_midway_keeps_the_previous_checkpoint(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint(make_checkpoint(seed=1), f"{root}/last.ckpt")
    broken = {"big": torch.ones(1_000_000), "then": Unpicklable()}  # the tensor data is written first
    with pytest.raises(RuntimeError, match="refuses to be pickled"):
        io.save_checkpoint(broken, f"{root}/last.ckpt")
    assert_same(io.load_checkpoint(f"{root}/last.ckpt"), make_checkpoint(seed=1))
    assert listing(root) == ["last.ckpt"]  # the temporary file is gone too


def test_fsync_flushes_the_file_and_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    io = TorchCheckpointIO(fsync=True)
    io.save_checkpoint(make_checkpoint(), str(tmp_path / "durable.ckpt"))
    assert_same(io.load_checkpoint(str(tmp_path / "durable.ckpt")), make_checkpoint())
    assert synced == [False, True]  # the temporary file before the rename, the directory after it
    assert repr(io) == "TorchCheckpointIO(fsync=True)"


# -- a real SIGKILL in the middle of a save -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_mb", [1, 64, 128], ids=lambda mb: f"killed-after-{mb}MB-of-144MB")
def test_sigkill_mid_save_leaves_the_last_complete_checkpoint(tmp_path: Path, kill_after_mb: int) -> None:
    last_printed, size, leftovers = kill_while_writing(
        tmp_path, kill_after_mb * 2**20, imports="from torchplug.io import TorchCheckpointIO", io="TorchCheckpointIO()"
    )
    loaded = TorchCheckpointIO().load_checkpoint(str(tmp_path / "ckpt" / "last.ckpt"))
    assert_last_complete(loaded, last_printed, size, leftovers)
