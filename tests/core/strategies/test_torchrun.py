"""The Trainer under the real ``torchrun``: one node of two processes, and two nodes of one on loopback.

torchrun starts every process; the Trainer must detect the torchelastic environment, take the
ranks from it, and start nothing itself.
"""

from __future__ import annotations

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
    records,
    reference_state,
    run,
    start,
)

pytestmark = [pytest.mark.slow, linux_only]


@pytest.mark.parametrize("devices", ["2", "auto"])
def test_torchrun_two_processes_on_one_node(tmp_path: Path, devices: str) -> None:
    command = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node",
        "2",
        str(TRAIN),
        "--out",
        str(tmp_path),
        "--strategy",
        "ddp",
        "--devices",
        devices,
    ]
    result = run(command, tmp_path / "output.log")
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    for record in ranks.values():
        assert record["environment"] == "TorchElasticEnvironment"
        assert record["world_size"] == 2
        assert record["num_nodes"] == 1
        assert "cluster_environment  torchelastic  (torchelastic: detected" in record["describe"]
        if devices == "auto":
            assert "devices='auto': TorchElasticEnvironment started 2 process(es) on this node" in record["describe"]
    assert ranks[0]["hash"] == ranks[1]["hash"]
    assert_close_states(torch.load(tmp_path / "rank0.pt"), reference_state(epochs=2))
    constructed = sorted((r["global_rank"], r["world_size"]) for r in records(tmp_path, "constructed_").values())
    assert constructed == [(0, 2), (1, 2)]
    # torchrun's agent is the parent of both ranks: neither rank started a process of its own.
    started = records(tmp_path, "started_rank")
    assert started["0"]["ppid"] == started["1"]["ppid"]
    assert not any(main["launched_by_us"] for main in records(tmp_path, "main_").values())
    assert len(records(tmp_path, "main_")) == 2
    assert not result.leftovers


def test_two_nodes_of_one_process_on_loopback(tmp_path: Path) -> None:
    # Two torchrun agents, as on two machines: node 0 and node 1 meet at 127.0.0.1:PORT (torchrun's
    # static rendezvous, as in a hand-written multi-node launch). Each starts one process.
    port = free_port()
    procs = []
    for node in range(2):
        command = [
            str(TORCHRUN),
            "--nnodes",
            "2",
            "--nproc_per_node",
            "1",
            "--node_rank",
            str(node),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            str(TRAIN),
            "--out",
            str(tmp_path),
            "--strategy",
            "ddp",
            "--devices",
            "1",
            "--num-nodes",
            "2",
        ]
        log = tmp_path / f"node{node}.log"
        procs.append((start(command, log), log))
    results = [finish(proc, log) for proc, log in procs]
    for result in results:
        assert result.returncode == 0, result.tail()
        assert not result.leftovers
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert {r["world_size"] for r in ranks.values()} == {2}
    assert {r["num_nodes"] for r in ranks.values()} == {2}
    assert [r["node_rank"] for r in ranks.values()] == [0, 1]  # global rank R runs on node R
    assert {r["local_rank"] for r in ranks.values()} == {0}
    assert {r["environment"] for r in ranks.values()} == {"TorchElasticEnvironment"}
    assert ranks[0]["hash"] == ranks[1]["hash"]
    assert_close_states(torch.load(tmp_path / "rank0.pt"), reference_state(epochs=2))
    constructed = sorted((r["global_rank"], r["world_size"]) for r in records(tmp_path, "constructed_").values())
    assert constructed == [(0, 2), (1, 2)]  # right from Trainer() on


def test_devices_that_disagree_with_torchrun_are_an_error_that_says_so(tmp_path: Path) -> None:
    command = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node",
        "2",
        str(TRAIN),
        "--out",
        str(tmp_path),
        "--strategy",
        "ddp",
        "--devices",
        "3",
    ]
    result = run(command, tmp_path / "output.log")
    assert result.returncode != 0
    assert "You set `devices=3`, but torchrun started 2 processes per node" in result.output
    assert not result.leftovers
