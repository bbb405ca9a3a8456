"""Against a real single-node SLURM cluster on loopback (the session fixture ``slurm`` starts and stops it).

* ``srun -n2 python train.py`` trains with DDP over 2 ranks, all chosen automatically.
* An ``sbatch --requeue`` job gets ``scancel --signal=USR1`` mid-training, requeues itself from
  rank 0, runs again with ``SLURM_RESTART_COUNT=1``, resumes by itself, and ends with the same
  weights, bit for bit, as an uninterrupted run.
* ``scancel`` (SIGTERM) writes the checkpoint before the tasks end, and the CSV logger's rows with it;
  ``scancel --signal=INT`` stops both tasks after the same step with ``interrupted.ckpt`` (exit 130).
* Detection is off in ``srun --job-name=interactive``, with ``TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS=slurm``,
  in a ``salloc`` shell and in a batch script; on for ``srun`` inside both.
* Concurrent steps of one job get different ports; the hostlist parser agrees with ``scontrol``.

Every run writes into its own fresh folder: a new cluster starts job ids at 1 again.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.env_slurm.cluster import Cluster
from tests.env_slurm.test_hostlist import CASES
from torchplug_slurm import expand_hostlist

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"
TRAIN = [sys.executable, "-u", str(SCRIPTS / "train.py")]
PROBE = [sys.executable, "-u", str(SCRIPTS / "probe.py")]
EPOCHS = 6
STEPS = EPOCHS * 256 // 16 // 2  # 256 samples, batch 16, 2 ranks


def weights(out: Path, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(out / f"weights.rank{rank}.pt", weights_only=True)  # type: ignore[no-any-return]


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def report(out: Path, rank: int, kind: str = "report") -> dict[str, Any]:
    return json.loads((out / f"{kind}.rank{rank}.json").read_text())  # type: ignore[no-any-return]


def outputs(out: Path) -> str:
    return "\n".join(f"==> {p} <==\n{p.read_text(errors='replace')}" for p in sorted(out.glob("*.out")))


def wait_for(ready: Callable[[], bool], timeout: float, what: str, details: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{details()}")
        time.sleep(0.1)


def sbatch(slurm: Cluster, out: Path, lines: list[str], options: str) -> str:
    script = out / "job.sh"
    script.write_text("\n".join(["#!/bin/bash", f"#SBATCH {options} --output={out}/job-%j.out", *lines, ""]))
    return slurm.run(["sbatch", "--parsable", str(script)]).stdout.strip().split(";")[0]


def wait_until_done(slurm: Cluster, job: str, out: Path, timeout: float) -> dict[str, str]:
    state: dict[str, str] = {}

    def done() -> bool:
        state.update(slurm.job_state(job))
        return state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

    wait_for(done, timeout, f"job {job} to finish", lambda: f"{state}\n{outputs(out)}")
    return state


@pytest.fixture(scope="module")
def reference(slurm: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted ``srun -n2 python train.py`` run."""
    out = tmp_path_factory.mktemp("reference")
    result = slurm.run(
        ["srun", "-n2", *TRAIN, "--out", str(out), "--max-epochs", str(EPOCHS)], timeout=300, check=False
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return out


def test_srun_trains_ddp_over_two_ranks(reference: Path) -> None:
    first, second = report(reference, 0), report(reference, 1)
    for rank, data in enumerate((first, second)):
        assert data["rank"] == rank
        assert (data["environment"], data["world_size"], data["num_devices"]) == ("SLURMEnvironment", 2, 2)
        assert (data["strategy"], data["global_step"], data["preempted"]) == ("DDPStrategy", STEPS, False)
    assert "slurm: detected (SLURM_JOB_ID=" in first["describe"]
    assert "devices='auto': SLURMEnvironment started 2 process(es) on this node" in first["describe"]
    assert "strategy='auto'" in first["describe"]
    assert same(weights(reference, 0), weights(reference, 1))


def one_process_reference(epochs: int = EPOCHS, world_size: int = 2) -> dict[str, torch.Tensor]:
    """The weights data-parallel training of train.py must reach, in one process on the same global batch.

    Each step sums the gradients of every rank's batch of 16 (the shards a DistributedSampler gives
    each rank, seed 0, reshuffled per epoch) divided by the number of ranks: DDP's average.
    """
    from torch.utils.data import DistributedSampler

    from tests.env_slurm.scripts.train import MLP, dataset

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = MLP()
            optimizer = model.configure_optimizers()
            data = dataset()
            for epoch in range(epochs):
                shards = []
                for rank in range(world_size):
                    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
                    sampler.set_epoch(epoch)
                    shards.append(list(sampler))
                for start in range(0, len(shards[0]), 16):
                    for shard in shards:
                        x, y = data[shard[start : start + 16]]
                        (torch.nn.functional.mse_loss(model.net(x), y) / world_size).backward()
                    optimizer.step()
                    optimizer.zero_grad()
            return {k: v.detach().clone() for k, v in model.state_dict().items()}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("job", ["ddp", "fsdp-sharded-checkpoints"])
def test_srun_job_reaches_the_weights_of_one_process_on_the_same_global_batch(
    slurm: Cluster, reference: Path, tmp_path: Path, job: str
) -> None:
    out = reference
    if job != "ddp":
        command = ["srun", "-n2", *TRAIN, "--out", str(tmp_path), "--max-epochs", str(EPOCHS), "--sharded"]
        result = slurm.run(command, timeout=300, check=False)
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        out = tmp_path
        assert report(out, 0)["strategy"] == "FSDPStrategy"
        last = out / "root" / "checkpoints" / "last.ckpt"
        assert sorted(p.name for p in last.iterdir()) == [
            ".metadata",
            ".torchplug-digest",
            "__0_0.distcp",
            "__1_0.distcp",
        ]
    expected = one_process_reference()
    for rank in (0, 1):
        actual = weights(out, rank)
        assert actual.keys() == expected.keys()
        for key in expected:
            torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-6, msg=f"rank {rank}: {key}")


def test_sbatch_job_is_preempted_requeues_itself_and_resumes_exactly(
    slurm: Cluster, reference: Path, tmp_path: Path
) -> None:
    train = " ".join([*TRAIN, "--out", str(tmp_path), "--sleep", "0.1", "--max-epochs", str(EPOCHS)])
    job = sbatch(
        slurm,
        tmp_path,
        ['echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"', f"srun {train}"],
        "--job-name=requeue --ntasks=2 --requeue --open-mode=append",
    )
    wait_for(
        lambda: (tmp_path / "started.0.json").exists(),
        120,
        "the first run to start training",
        lambda: f"{slurm.job_state(job)}\n{outputs(tmp_path)}",
    )
    slurm.run(["scancel", "--signal=USR1", job])
    state = wait_until_done(slurm, job, tmp_path, timeout=240)
    log = outputs(tmp_path)

    assert (state["JobState"], state["Restarts"], state["ExitCode"]) == ("COMPLETED", "1", "0:0"), log
    assert "run 0 of job" in log and "run 1 of job" in log
    assert "DUE TO JOB REQUEUE" in log  # scontrol requeue, run by rank 0, ended the first run
    preempted_at = json.loads((tmp_path / "started.1.json").read_text())["resumed_at_step"]
    assert 0 < preempted_at < STEPS, log  # resumed mid-training, from the checkpoint
    assert (tmp_path / "root" / f"hpc_ckpt_{job}.ckpt").exists()
    final = report(tmp_path, 0)
    assert (final["restart_count"], final["global_step"], final["world_size"]) == (1, STEPS, 2)
    assert same(weights(tmp_path, 0), weights(tmp_path, 1))
    assert same(weights(tmp_path, 0), weights(reference, 0)), "the resumed run differs from the uninterrupted one"


def test_scancel_writes_the_checkpoint_before_the_tasks_end(slurm: Cluster, tmp_path: Path) -> None:
    """SIGTERM is held back to the next step boundary, the checkpoint written, then SIGTERM ends the tasks."""
    command = ["srun", "-n2", "--job-name=sigterm", *TRAIN, "--out", str(tmp_path), "--sleep", "0.1"]
    with (tmp_path / "srun.out").open("w") as log:
        srun = subprocess.Popen(command, env=slurm.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(
                lambda: (tmp_path / "started.0.json").exists(), 120, "training to start", lambda: outputs(tmp_path)
            )
            job = slurm.run(["squeue", "-h", "-n", "sigterm", "-o", "%i"]).stdout.strip()
            slurm.run(["scancel", job])
            code = srun.wait(timeout=60)
        finally:
            srun.kill()
    text = outputs(tmp_path)
    assert code != 0, text
    assert "Terminated" in text, text
    assert (tmp_path / "root" / f"hpc_ckpt_{job}.ckpt").exists(), text
    assert not list(tmp_path.glob("report.rank*.json")), "the tasks went on after SIGTERM"


def logged_steps(out: Path) -> list[int]:
    with open(out / "root" / "torchplug_logs" / "run" / "metrics.csv") as file:
        return [int(row["step"]) for row in csv.DictReader(file) if row.get("loss")]


def scancel_mid_training(slurm: Cluster, out: Path, name: str, *scancel: str) -> tuple[int, str, str]:
    """``srun -n2 train.py --csv --checkpoint``, then ``scancel [OPTIONS] JOB`` mid-training: (code, output, job)."""
    command = [
        "srun",
        "-n2",
        f"--job-name={name}",
        *TRAIN,
        "--out",
        str(out),
        "--sleep",
        "0.1",
        "--csv",
        "--checkpoint",
    ]
    with (out / "srun.out").open("w") as log:
        srun = subprocess.Popen(command, env=slurm.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: (out / "started.0.json").exists(), 120, "training to start", lambda: outputs(out))
            job = slurm.run(["squeue", "-h", "-n", name, "-o", "%i"]).stdout.strip()
            time.sleep(0.5)
            slurm.run(["scancel", *scancel, job])
            code = srun.wait(timeout=90)
        finally:
            srun.kill()
    return code, outputs(out), job


def test_scancel_flushes_the_csv_logger_with_the_checkpoint(slurm: Cluster, tmp_path: Path) -> None:
    """SIGTERM (env-slurm's own handling): the checkpoint's step is the last row the CSV logger wrote."""
    code, text, job = scancel_mid_training(slurm, tmp_path, "sigterm-csv")
    assert code != 0, text
    step = int(torch.load(tmp_path / "root" / f"hpc_ckpt_{job}.ckpt", weights_only=True)["global_step"])
    assert logged_steps(tmp_path) == list(range(step)), text


def test_scancel_sigint_stops_both_tasks_after_the_same_step(slurm: Cluster, tmp_path: Path) -> None:
    """SIGINT to every task: they stop after one step together, write interrupted.ckpt, flush the logs, exit 130."""
    code, text, _ = scancel_mid_training(slurm, tmp_path, "sigint", "--signal=INT")
    assert code == 130, text
    step = int(torch.load(tmp_path / "root" / "ckpts" / "interrupted.ckpt", weights_only=True)["global_step"])
    assert f"fit() stopped by SIGINT after global step {step}." in text
    assert logged_steps(tmp_path) == list(range(step)), text
    assert not list(tmp_path.glob("report.rank*.json")), "the tasks went on after SIGINT"


def probe(slurm: Cluster, command: list[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result = slurm.run(command, timeout=120, env=env or {})
    return sorted(
        (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")),
        key=lambda r: r.get("rank", -1),
    )


def test_srun_tasks_are_detected(slurm: Cluster) -> None:
    first, second = probe(slurm, ["srun", "-n2", *PROBE])
    assert (first["selected"], second["selected"]) == ("slurm", "slurm")
    assert (first["rank"], second["rank"], first["world_size"], first["per_node"]) == (0, 1, 2, 2)
    assert (first["address"], first["port"]) == (second["address"], second["port"])
    assert first["torch_imported"] is False


@pytest.mark.parametrize(
    ("command", "env", "why"),
    [
        pytest.param(
            ["srun", "-n1", "--job-name=interactive", *PROBE],
            {},
            "SLURM_JOB_NAME=interactive",
            id="srun-job-name-interactive",
        ),
        pytest.param(
            ["srun", "-n2", *PROBE],
            {"TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS": "slurm"},
            "slurm: skipped (TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)",
            id="skip-switch",
        ),
        pytest.param(["salloc", "-n2", *PROBE], {}, "SLURM_STEP_ID not set", id="salloc-shell"),
    ],
)
def test_detection_is_off(slurm: Cluster, command: list[str], env: dict[str, str], why: str) -> None:
    for line in probe(slurm, command, env):
        assert line["selected"] == "local", line
        assert any(why in trace for trace in line["trace"]), line


def test_srun_inside_salloc_is_detected_despite_the_job_name(slurm: Cluster) -> None:
    lines = probe(slurm, ["salloc", "-n2", "srun", "-n2", *PROBE])
    assert [(line["selected"], line["job_name"]) for line in lines] == [("slurm", "interactive")] * 2


def test_batch_script_itself_is_not_detected_but_its_srun_step_is(slurm: Cluster, tmp_path: Path) -> None:
    probe_line = " ".join(PROBE)
    job = sbatch(slurm, tmp_path, [probe_line, f"srun -n2 {probe_line}"], "--ntasks=2")
    state = wait_until_done(slurm, job, tmp_path, timeout=120)
    lines = [json.loads(line) for line in outputs(tmp_path).splitlines() if line.startswith("{")]
    assert state["JobState"] == "COMPLETED", outputs(tmp_path)
    assert [line["selected"] for line in lines] == ["local", "slurm", "slurm"], lines


def test_concurrent_steps_of_one_job_get_different_ports(slurm: Cluster, tmp_path: Path) -> None:
    step = f"srun -n2 --exact {' '.join(PROBE)} --hold 3"
    job = sbatch(slurm, tmp_path, [f"{step} &", f"{step} &", "wait"], "--ntasks=4")
    state = wait_until_done(slurm, job, tmp_path, timeout=120)
    lines = [json.loads(line) for line in outputs(tmp_path).splitlines() if line.startswith("{")]
    assert state["JobState"] == "COMPLETED" and len(lines) == 4, outputs(tmp_path)
    by_step: dict[str, set[int]] = {}
    for line in lines:
        by_step.setdefault(line["step"], set()).add(line["port"])
    assert len(by_step) == 2 and all(len(ports) == 1 for ports in by_step.values()), by_step
    assert len({port for ports in by_step.values() for port in ports}) == 2, by_step
    holders = [line for line in lines if "bound_at" in line]  # rank 0 of each step held its port
    assert len(holders) == 2
    assert max(h["bound_at"] for h in holders) < min(h["released_at"] for h in holders), "the steps did not overlap"


@pytest.mark.parametrize(
    "hostlist",
    [case[0] for name, case in CASES.items() if name != "suffix-after-bracket"],
    ids=[name for name in CASES if name != "suffix-after-bracket"],
)
def test_hostlist_matches_scontrol(slurm: Cluster, hostlist: str) -> None:
    result = slurm.run(["scontrol", "show", "hostnames", hostlist])
    assert expand_hostlist(hostlist) == result.stdout.split()
