"""accel-cuda on a real NVIDIA GPU: parsing against the real count, training in each precision, stats, RNG, DDP.

Skipped where torch sees no GPU. The checks that need a process whose CUDA is untouched (counting
before a fork) and DDP run in fresh subprocesses, since this pytest process initialises CUDA.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_cuda.scripts.blobs import Classifier, loaders, quiet
from torchplug.precision.amp import MixedPrecision
from torchplug_cuda import CUDAAccelerator, find_usable_cuda_devices, num_cuda_devices, parse_cuda_devices

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"needs an NVIDIA GPU: torch.cuda.is_available() is False (torch {torch.__version__})",
    ),
]

SCRIPTS = Path(__file__).parent / "scripts"
REPO_ROOT = Path(__file__).parents[2]
_LAUNCHER_VARIABLES = (
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHPLUG_PARENT_PID",
    "SLURM_JOB_ID",
    "SLURM_NTASKS",
)


def fresh_environment() -> dict[str, str]:
    """This process's environment without any launcher's or scheduler's variables."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT))
    return env


# -- devices ----------------------------------------------------------------------------------


def test_parsing_against_the_real_count() -> None:
    count = torch.cuda.device_count()
    assert num_cuda_devices() == count >= 1
    assert parse_cuda_devices(-1) == parse_cuda_devices("auto") == list(range(count))
    assert parse_cuda_devices(1) == [0]
    assert parse_cuda_devices(f"{count - 1},") == [count - 1]
    with pytest.raises(ValueError, match=rf"devices={count + 1} asks for {count + 1} GPUs, but only {count} GPU"):
        parse_cuda_devices(count + 1)
    with pytest.raises(ValueError, match=rf"devices=\[{count}\] asks for GPU {count}, but only {count} GPU"):
        parse_cuda_devices([count])
    assert CUDAAccelerator.get_parallel_devices([0]) == [torch.device("cuda", 0)]


FORK_CHECK = """
import multiprocessing, sys
import torch
from torchplug_cuda import CUDAAccelerator, num_cuda_devices

count = num_cuda_devices()
assert count >= 1 and CUDAAccelerator.is_available() and CUDAAccelerator.unavailable_reason() is None
assert CUDAAccelerator.parse_devices(-1) == list(range(count))
# What torch itself does before any GPU work once the accelerator is loaded (16-mixed builds a scaler).
assert torch.cuda.is_available()
torch.amp.GradScaler("cuda")
assert not torch.cuda.is_initialized(), "counting initialised CUDA"

def child(queue):
    queue.put(float(torch.ones(4, device="cuda").sum().item()))  # fails in a child forked after CUDA init

context = multiprocessing.get_context("fork")
queue = context.Queue()
worker = context.Process(target=child, args=(queue,))
worker.start()
worker.join(120)
assert worker.exitcode == 0, f"the forked child failed (exit code {worker.exitcode})"
print("fork-ok", queue.get(timeout=5))
"""


def test_counting_leaves_cuda_uninitialised_so_a_fork_can_use_the_gpu() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FORK_CHECK],
        capture_output=True,
        text=True,
        timeout=300,
        env=fresh_environment(),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fork-ok 4.0" in result.stdout


# -- training ---------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed"])
def test_fit_on_one_gpu(precision: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Classifier()
    trainer = torchplug.Trainer(**quiet(devices=1, precision=precision, max_epochs=4, default_root_dir=tmp_path))
    trainer.fit(model, *loaders())
    assert isinstance(trainer.strategy.accelerator, CUDAAccelerator)
    assert trainer.strategy.root_device == torch.device("cuda", 0)
    assert next(model.parameters()).device.type == "cuda"
    assert next(model.parameters()).dtype == torch.float32
    assert float(trainer.callback_metrics["val_acc"]) > 0.9, (precision, trainer.callback_metrics)
    plugin = trainer.strategy.precision
    if precision == "16-mixed":
        assert isinstance(plugin, MixedPrecision) and plugin.device_type == "cuda"
        assert plugin.scaler is not None and plugin.scaler.is_enabled()
        assert plugin.state_dict()["scaler"]["scale"] > 0
    elif precision == "bf16-mixed":
        assert isinstance(plugin, MixedPrecision) and plugin.device_type == "cuda" and plugin.scaler is None


def test_checkpoint_holds_the_gpu_random_states_and_loads_weights_only(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(**quiet(devices=1, max_epochs=1, default_root_dir=tmp_path))
    trainer.fit(Classifier(), *loaders())
    trainer.save_checkpoint(tmp_path / "gpu.ckpt")
    trainer.checkpoint_io.flush()
    checkpoint = torch.load(tmp_path / "gpu.ckpt", weights_only=True)
    states = checkpoint["rng"]["accelerator"]["cuda"]
    assert len(states) == torch.cuda.device_count()
    assert all(s.dtype == torch.uint8 and s.device.type == "cpu" for s in states)


# -- per-device services ----------------------------------------------------------------------


def test_device_stats_are_real_numbers() -> None:
    device = torch.device("cuda", 0)
    accelerator = CUDAAccelerator()
    accelerator.setup_device(device)
    block = torch.empty(1 << 20, device=device)  # 4 MiB
    stats = accelerator.get_device_stats(device)
    del block
    assert stats["memory_allocated_bytes"] >= 4 << 20
    assert stats["memory_peak_allocated_bytes"] >= stats["memory_allocated_bytes"]
    assert stats["memory_reserved_bytes"] >= stats["memory_allocated_bytes"]
    assert 0 < stats["memory_free_bytes"] < stats["memory_total_bytes"]
    assert {"alloc_retries", "ooms"} <= set(stats)
    if "utilization_percent" in stats:
        assert 0 <= stats["utilization_percent"] <= 100


def test_rng_state_round_trip() -> None:
    accelerator = CUDAAccelerator()
    torch.cuda.manual_seed_all(1234)
    torch.rand(1, device="cuda")  # CUDA is initialised from here on
    saved: Any = accelerator.get_rng_state()
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=True)
    first = torch.rand(8, device="cuda")
    torch.rand(100, device="cuda")
    accelerator.set_rng_state(restored)
    assert torch.equal(torch.rand(8, device="cuda"), first)


def test_teardown_returns_the_cached_memory() -> None:
    block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    del block
    assert torch.cuda.memory_reserved(0) > 0
    CUDAAccelerator().teardown()
    assert torch.cuda.memory_reserved(0) == torch.cuda.memory_allocated(0)


@pytest.mark.parametrize("isolated", [True, False], ids=["child-process", "this-process"])
def test_find_usable_cuda_devices(isolated: bool) -> None:
    usable = find_usable_cuda_devices(-1, isolated=isolated)
    assert usable and set(usable) <= set(range(torch.cuda.device_count()))
    assert find_usable_cuda_devices(1, isolated=isolated) == usable[:1]


# -- DDP --------------------------------------------------------------------------------------


def run_ddp_script(out: Path, *args: str) -> dict[int, dict[str, Any]]:
    """Run scripts/ddp_fit.py and return what each rank recorded, by global rank."""
    command = [sys.executable, str(SCRIPTS / "ddp_fit.py"), "--out", str(out), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=fresh_environment(), cwd=out, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return {r["global_rank"]: r for r in (json.loads(p.read_text()) for p in sorted(out.glob("rank*.json")))}


@pytest.mark.slow
def test_ddp_fork_with_16_mixed_forks_a_worker_that_can_use_the_gpu(tmp_path: Path) -> None:
    # One forked worker is enough to show that resolving the Trainer (16-mixed builds its
    # GradScaler then) left CUDA usable in a fork; it needs only one GPU.
    ranks = run_ddp_script(tmp_path, "--strategy", "ddp_fork", "--devices", "1", "--precision", "16-mixed")
    assert list(ranks) == [0]
    assert ranks[0]["device"] == "cuda:0" and ranks[0]["backend"] == "nccl"
    assert len(list(tmp_path.glob("parent*.json"))) == 1
    assert ranks[0]["val_acc"] > 0.9


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP over NCCL needs at least 2 GPUs")
@pytest.mark.parametrize(
    ("strategy", "precision"), [("ddp", "32-true"), ("ddp", "16-mixed"), ("ddp_fork", "bf16-mixed")]
)
def test_ddp_on_two_gpus_over_nccl(strategy: str, precision: str, tmp_path: Path) -> None:
    ranks = run_ddp_script(tmp_path, "--strategy", strategy, "--precision", precision)
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["pid"] != ranks[1]["pid"]
    assert [ranks[i]["device"] for i in (0, 1)] == ["cuda:0", "cuda:1"]
    assert [ranks[i]["current_device"] for i in (0, 1)] == [0, 1]
    assert {r["backend"] for r in ranks.values()} == {"nccl"}
    assert {r["world_size"] for r in ranks.values()} == {2}
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 3 * 8  # 512 samples, 2 ranks x 32 per batch
    assert ranks[0]["weights"] == ranks[1]["weights"], "the ranks ended with different weights"
    assert ranks[0]["val_acc"] > 0.9
