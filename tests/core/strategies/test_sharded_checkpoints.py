"""Sharded checkpoints: ``FSDPStrategy(state_dict_type="sharded")`` writing DCP directories with real processes (gloo).

One run of 2 processes (FSDP, Adam, dropout, each rank with its own random state) checkpoints
every step; the tests read what it wrote:

* every process wrote its own shards (one data file each, about the same size), and the directory
  holds the model, the optimizer, the loops, the callbacks and the random state of *each* rank;
* resumed mid-epoch on 2 processes, training ends with exactly the weights of the uninterrupted run
  (dropout draws from each rank's own random state, so this needs each rank's state back);
* resharded: resumed on 1, 2, 3 and 4 FSDP processes (sharded, and full reading the directory), on
  2 DDP processes (``plugins=["dcp"]``) and on one process without any process group, the restored
  model and optimizer tensors equal the checkpoint's, exactly;
* ``save_top_k`` rotation removes whole directories and leaves no temporaries behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.core.strategies.runner import Run, linux_only, rank_records, train
from torchplug.io.dcp_io import read_full, read_metadata

pytestmark = [pytest.mark.slow, linux_only]

STEPS = 8  # 64 samples, batch 8, 2 processes, 2 epochs
WRITER = ("--strategy", "fsdp", "--sharded", "--optimizer", "adam", "--dropout", "0.2", "--rank-rng", "--full-state")

Written = Callable[[], tuple[Path, Run]]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The 2-process FSDP run, checkpointing (sharded) after every step; run once, on first use."""
    cache: list[tuple[Path, Run]] = []

    def get() -> tuple[Path, Run]:
        if not cache:
            out = tmp_path_factory.mktemp("sharded")
            result = train(out, *WRITER, "--root", str(out / "root"), "--checkpoint")
            assert result.returncode == 0, result.tail()
            cache.append((out, result))
        return cache[0]

    return get


def checkpoint(out: Path, name: str) -> Path:
    return out / "root" / "ckpts" / name


def tensors_equal(actual: Any, expected: Any, where: str = "") -> None:
    """Same nested structure, tensors exactly equal (``torch.equal``), other values equal."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert torch.equal(actual.cpu(), expected.cpu()), f"{where} differs"
    elif isinstance(expected, dict):
        assert sorted(map(str, actual)) == sorted(map(str, expected)), where
        for key in expected:
            tensors_equal(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, b) in enumerate(zip(actual, expected)):
            tensors_equal(a, b, f"{where}[{i}]")
    else:
        assert actual == expected, where


def test_every_process_writes_its_own_shards(written: Written) -> None:
    out, result = written()
    ckpts = out / "root" / "ckpts"
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == sorted([f"epoch={s // 5}-step={s}.ckpt" for s in range(1, STEPS + 1)] + ["last.ckpt"])
    last = checkpoint(out, "last.ckpt")
    files = sorted(p.name for p in last.iterdir())
    # one data file per process, the metadata, and the digest of the metadata (verified on load)
    assert files == [".metadata", ".torchplug-digest", "__0_0.distcp", "__1_0.distcp"]
    sizes = [(last / f).stat().st_size for f in files if f.endswith(".distcp")]
    assert min(sizes) > 0.5 * max(sizes)  # the shards, not everything on rank 0
    assert not list(out.rglob(".*.tmp-*")), "a temporary directory was left behind"
    assert not result.leftovers


def test_the_directory_holds_every_part_of_the_training_state(written: Written) -> None:
    out, _ = written()
    path = str(checkpoint(out, "epoch=0-step=3.ckpt"))
    keys = set(read_metadata(path).state_dict_metadata)
    assert {"torchplug.common", "torchplug.rank0", "torchplug.rank1"} <= keys
    assert {"state_dict.net.0.weight", "optimizer_states.0.state.net.0.weight.exp_avg"} <= keys
    full = read_full(path)
    assert (full["global_step"], full["epoch"]) == (3, 0)
    assert {"loops", "callbacks", "lr_schedulers", "hyper_parameters", "optimizer_states", "rng"} <= set(full)
    assert full["state_dict"]["net.0.weight"].shape == (64, 32)  # joined from both shards
    assert full["optimizer_states"][0]["state"]["net.0.weight"]["step"] == 3
    # Each rank's random state is its own (RankRandomness set them apart).
    first, second = (read_full(path, rank=r, keep=lambda k: False)["rng"] for r in (0, 1))
    assert not torch.equal(first["global"]["torch"], second["global"]["torch"])


def test_resuming_mid_epoch_on_two_processes_ends_as_the_uninterrupted_run(written: Written, tmp_path: Path) -> None:
    out, _ = written()
    source = checkpoint(out, "epoch=0-step=3.ckpt")
    result = train(tmp_path, *WRITER, "--resume", str(source), "--record-restored")
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert {r["global_step"] for r in ranks.values()} == {STEPS}
    assert {r["batches_run"] for r in ranks.values()} == {STEPS - 3}
    assert ranks[0]["hash"] == rank_records(out)[0]["hash"]  # bit for bit, dropout included
    for rank in (0, 1):  # each rank got its own random state back
        restored = torch.load(tmp_path / f"restored_rank{rank}.pt")
        saved = read_full(str(source), rank=rank, keep=lambda k: False)["rng"]["global"]["torch"]
        assert torch.equal(restored["rng"], saved), f"rank {rank}"


RESHARDED = {
    "fsdp-1-process": ("--strategy", "fsdp", "--sharded", "--devices", "1"),
    "fsdp-2-processes": ("--strategy", "fsdp", "--sharded", "--devices", "2"),
    "fsdp-3-processes": ("--strategy", "fsdp", "--sharded", "--devices", "3"),
    "fsdp-4-processes": ("--strategy", "fsdp", "--sharded", "--devices", "4"),
    "ddp-2-processes": ("--strategy", "ddp", "--io", "dcp", "--devices", "2"),
    "one-process-no-process-group": ("--strategy", "auto", "--devices", "1"),
    "fsdp-full-2-processes": ("--strategy", "fsdp", "--devices", "2"),
}


@pytest.mark.parametrize("layout", list(RESHARDED))
def test_resharded_resume_restores_every_tensor_exactly(written: Written, tmp_path: Path, layout: str) -> None:
    out, _ = written()
    source = checkpoint(out, "epoch=0-step=3.ckpt")
    args = (*RESHARDED[layout], "--optimizer", "adam", "--dropout", "0.2", "--full-state", "--record-restored")
    result = train(tmp_path, *args, "--resume", str(source), "--max-steps", "4")
    assert result.returncode == 0, result.tail()
    restored = torch.load(tmp_path / "restored_rank0.pt")
    expected = read_full(str(source))
    assert restored["global_step"] == 3
    tensors_equal(restored["state_dict"], expected["state_dict"], "state_dict")
    tensors_equal(restored["optimizer_states"], expected["optimizer_states"], "optimizer_states")
    ranks = rank_records(tmp_path)
    assert {r["global_step"] for r in ranks.values()} == {4}  # and training went on from there


def test_rotation_removes_whole_directories(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = train(out, "--strategy", "fsdp", "--sharded", "--root", str(out / "root"), "--checkpoint", "--top-k", "2")
    assert result.returncode == 0, result.tail()
    ckpts = out / "root" / "ckpts"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=1-step=7.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    for kept in ckpts.iterdir():
        assert (kept / ".metadata").is_file()
    assert not list(out.rglob(".*.tmp-*")) and not list(out.rglob(".*removing*"))


def test_sharded_needs_a_collective_checkpoint_io(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "fsdp", "--sharded", "--io", "torch")
    assert result.returncode != 0
    assert "FSDPStrategy(state_dict_type='sharded') has every process write its shards" in result.output
    assert not list(tmp_path.glob("started_rank*.json"))  # refused before any process started
