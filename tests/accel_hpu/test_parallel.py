"""``hpu_parallel``: DDP over HCCL with two real processes on two fake HPUs.

The run is a user script (scripts/train_hpu.py) that the core's launcher re-runs for rank 1. The
fake ``hccl`` backend runs gloo underneath and, like HCCL, refuses to all-reduce int64 and float64
tensors, so the run shows that the strategy's collectives cast around it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import torchplug
from tests.accel_hpu.fake import subprocess_env
from tests.accel_hpu.models import quiet, reference_weights
from torchplug_hpu import HPUParallelStrategy, _vendor

SCRIPT = Path(__file__).parent / "scripts" / "train_hpu.py"

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Train once on two fake HPUs; return rank 0's summary and every rank's record."""
    out = tmp_path_factory.mktemp("hpu_parallel")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out)],
        env=subprocess_env(fake=True, FAKE_HPU_COUNT="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        leftovers = _kill_session(proc.pid)
    assert proc.returncode == 0, output
    assert not leftovers, f"the run left processes behind: {leftovers}"
    ranks = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    return {"parent": json.loads((out / "parent.json").read_text()), "ranks": ranks}


def _kill_session(sid: int, grace: float = 10.0) -> list[int]:
    """Kill what is left of session ``sid`` after ``grace`` seconds; return what had to be killed."""
    deadline = time.monotonic() + grace
    while (alive := _members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return alive


def _members(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            found.append(int(entry))
    return found


@linux_only
@pytest.mark.slow
class TestTwoProcesses:
    def test_the_run_resolved_to_ddp_over_hccl(self, run: dict[str, Any]) -> None:
        parent = run["parent"]
        assert parent["strategy"] == "HPUParallelStrategy"
        assert "strategy             hpu_parallel  (strategy='auto'" in parent["describe"]
        assert "precision            hpu-bf16-mixed" in parent["describe"]
        assert {r["backend"] for r in run["ranks"].values()} == {"hccl"}
        assert {r["root_device"] for r in run["ranks"].values()} == {"hpu"}
        assert parent["autocast"] == ["True:torch.bfloat16"]

    def test_the_ranks_read_their_own_shards_and_reach_the_reference_weights(self, run: dict[str, Any]) -> None:
        ranks = run["ranks"]
        assert set(ranks) == {0, 1} and {r["world_size"] for r in ranks.values()} == {2}
        assert {r["sampler"] for r in ranks.values()} == {"DistributedSampler"}
        assert sorted(ranks[0]["indices"][:32] + ranks[1]["indices"][:32]) == list(range(64))
        reference = reference_weights(batch_size=16, epochs=2)  # two ranks x 8: the same batches of 16
        for record in ranks.values():
            assert record["weights"] == pytest.approx(reference, abs=1e-6)
        assert run["parent"]["global_step"] == 8

    def test_hccl_refuses_int64_and_the_strategy_casts_around_it(self, run: dict[str, Any]) -> None:
        for record in run["ranks"].values():
            assert record["raw_long_all_reduce_refused"] is True
            assert record["long_sum"] == [3, 20] and record["long_sum_dtype"] == "torch.int64"
            assert record["long_max"] == 6
            assert record["long_mean"] == 1.5
            assert record["double_sum"] == 2.0
            assert (record["any"], record["all"]) == (True, False)
            assert record["all_gather"] == [[0.0, 0.0], [1.0, 10.0]]

    def test_objects_of_any_size_broadcast_without_int64_sizes(self, run: dict[str, Any]) -> None:
        for record in run["ranks"].values():
            assert record["broadcast"] == {"from": 1, "pad": "x" * 110}

    def test_steps_are_marked_and_the_checkpoint_loads_on_the_cpu(self, run: dict[str, Any]) -> None:
        parent = run["parent"]
        assert parent["mark_steps"] == 2 * parent["global_step"]
        saved = torch.load(parent["best_model_path"], map_location="cpu", weights_only=True)
        flat = [float(v) for key in ("layer.weight", "layer.bias") for v in saved["state_dict"][key].flatten()]
        assert flat == pytest.approx(parent["weights"], abs=1e-7)


def test_the_hccl_backend_is_registered_before_joining(fake_habana: object) -> None:
    _vendor.import_hccl()
    assert dist.Backend.HCCL == "hccl"  # type: ignore[attr-defined]


def test_without_a_process_group_the_collectives_are_local() -> None:
    strategy = HPUParallelStrategy()
    assert strategy.reduce(torch.tensor(3)) == 3
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.precision_for("fp8") == "hpu-fp8"
    assert strategy.process_group_backend == "hccl"
    assert repr(strategy) == "HPUParallelStrategy(start_method='popen', find_unused_parameters=False)"


def test_a_start_method_can_be_chosen_by_instance(fake_habana: object, tmp_path: Path) -> None:
    trainer = torchplug.Trainer(
        accelerator="hpu", strategy=HPUParallelStrategy(start_method="spawn"), **quiet(tmp_path, devices=2)
    )
    assert type(trainer.strategy.launcher).__name__ == "MultiProcessingLauncher"
