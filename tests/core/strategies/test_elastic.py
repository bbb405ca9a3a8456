"""Multi-node and elastic runs under the real ``torchrun``, on loopback.

* Two torchrun agents (``--nnodes=2``) meet through a c10d rendezvous on 127.0.0.1, as two machines
  would, and train with DDP and with FSDP (sharded checkpoints): they reach the weights of the
  same global batch computed in one process.
* Elastic restart: under ``torchrun --max-restarts=1`` rank 1 is killed (SIGKILL) in the middle of
  an epoch; torchrun restarts every worker, and the Trainer resumes by itself (``restart_count()``
  > 0 means ``ckpt_path="auto"``) from the newest complete checkpoint, ending with exactly the
  weights of an uninterrupted run. With asynchronous sharded saves (``dcp_async``) the kill can land
  while a checkpoint is being written: that one is never picked.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import (
    TORCHRUN,
    TRAIN,
    assert_close_states,
    finish,
    free_port,
    linux_only,
    rank_records,
    reference_state,
    run,
    start,
)

pytestmark = [pytest.mark.slow, linux_only]

STEPS = 8  # 64 samples, batch 8, 2 processes, 2 epochs
JOBS = {
    "ddp": ("--strategy", "ddp"),
    "fsdp-sharded": ("--strategy", "fsdp", "--sharded", "--full-state"),
}


@pytest.mark.parametrize("job", list(JOBS))
def test_two_torchrun_agents_meet_through_c10d_and_train_one_job(tmp_path: Path, job: str) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    run_id = uuid.uuid4().hex[:8]
    procs = []
    for node in range(2):
        command = [
            str(TORCHRUN),
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}",
            str(TRAIN),
            "--out",
            str(tmp_path),
            *JOBS[job],
            "--devices",
            "1",
            "--num-nodes",
            "2",
            "--root",
            str(tmp_path / "root"),
            "--checkpoint",
        ]
        log = tmp_path / f"agent{node}.log"
        procs.append((start(command, log), log))
    results = [finish(proc, log) for proc, log in procs]
    for result in results:
        assert result.returncode == 0, result.tail()
        assert not result.leftovers
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert sorted(r["node_rank"] for r in ranks.values()) == [0, 1]  # one process on each "machine"
    assert {(r["world_size"], r["num_nodes"], r["local_rank"]) for r in ranks.values()} == {(2, 2, 0)}
    assert {r["environment"] for r in ranks.values()} == {"TorchElasticEnvironment"}
    # The same weights as one process computing the same global batch (rounding apart).
    assert_close_states(torch.load(tmp_path / "rank0.pt"), reference_state(epochs=2))
    last = tmp_path / "root" / "ckpts" / "last.ckpt"
    assert last.is_dir() if job == "fsdp-sharded" else last.is_file()


ELASTIC = {
    "ddp-files": ("--strategy", "ddp"),
    "fsdp-sharded-async": ("--strategy", "fsdp", "--sharded", "--io", "dcp_async", "--full-state"),
}


def torchrun_job(out: Path, job: str, *extra: str) -> list[str]:
    return [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--monitor-interval=0.5",
        str(TRAIN),
        "--out",
        str(out),
        *ELASTIC[job],
        "--dropout",
        "0.1",
        "--root",
        str(out / "root"),
        "--checkpoint",
        *extra,
    ]


@pytest.mark.parametrize("job", list(ELASTIC))
def test_a_killed_rank_restarts_the_job_which_resumes_by_itself_exactly(tmp_path: Path, job: str) -> None:
    uninterrupted = tmp_path / "uninterrupted"
    uninterrupted.mkdir()
    reference = run(torchrun_job(uninterrupted, job), uninterrupted / "output.log")
    assert reference.returncode == 0, reference.tail()

    killed = tmp_path / "killed"
    killed.mkdir()
    crash = ("--crash-rank", "1", "--crash-step", "5", "--crash-how", "kill", "--crash-once")
    result = run(torchrun_job(killed, job, *crash), killed / "output.log")
    assert result.returncode == 0, result.tail()
    assert not result.leftovers
    ranks = rank_records(killed)
    assert sorted(ranks) == [0, 1]
    for record in ranks.values():
        assert record["restart_count"] == 1  # torchrun ran the workers a second time
        assert record["ckpt_path"] is not None  # ... and they resumed, without being told where from
        assert record["global_step"] == STEPS
        assert 0 < record["batches_run"] < STEPS  # only what was left after the checkpoint
    resumed_from = Path(ranks[0]["ckpt_path"])
    assert resumed_from.parent == killed / "root" / "ckpts"
    assert ranks[0]["hash"] == rank_records(uninterrupted)[0]["hash"]  # bit for bit
    assert not list(killed.rglob(".*.tmp-*")) or job == "fsdp-sharded-async"  # a killed async save may leave one
