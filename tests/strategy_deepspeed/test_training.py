"""DeepSpeed trains for real: every stage over 2 CPU processes (gloo), compared with what DDP reaches.

The reference is the core's: the weights plain data parallelism reaches, computed in one process
(``tests/core/strategies/test_ddp.py`` shows DDP reaches them to rounding). DeepSpeed reaches them
to rounding too, not bitwise, once gradients are accumulated: it averages each micro-batch's
gradient over the processes before adding it to the partition (the reference divides the loss and
sums), so the last bit of a float32 may differ. Tolerance: ``rtol=1e-5, atol=1e-6``; the measured
difference is below 2e-8. Without accumulation stage 2 reaches them bitwise (not asserted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.core.strategies.runner import assert_close_states, rank_records, reference_state
from tests.strategy_deepspeed.conftest import train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("deepspeed_ops")]

STEPS = 8  # 64 samples, 32 per rank in batches of 8, 2 epochs
ACCUMULATE, CLIP = "2", "0.5"


def json_config(tmp_path: Path) -> tuple[str, ...]:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True}))
    return ("--config-json", str(path))


#: How each stage is asked for: a registry name, a config file, a config dict, or arguments.
STAGES: dict[str, Any] = {
    "stage_1-json-config": (1, json_config),
    "stage_2-dict-config": (
        2,
        lambda _: (
            "--config-dict",
            json.dumps({"zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True}),
        ),
    ),
    "stage_2-arguments": (2, lambda _: ("--strategy-args", json.dumps({"stage": 2, "reduce_bucket_size": 1000}))),
    "stage_3-name": (3, lambda _: ("--strategy", "deepspeed_stage_3")),
    "stage_2_offload-name": (2, lambda _: ("--strategy", "deepspeed_stage_2_offload")),
    "stage_3_offload-name": (3, lambda _: ("--strategy", "deepspeed_stage_3_offload")),
}


def engine_of(out: Path, rank: int = 0) -> dict[str, Any]:
    return json.loads((out / f"engine_rank{rank}.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("how", list(STAGES))
def test_each_stage_reaches_the_weights_ddp_reaches(tmp_path: Path, how: str) -> None:
    stage, args = STAGES[how]
    result = train(tmp_path, *args(tmp_path), "--accumulate", ACCUMULATE, "--clip", CLIP)
    assert result.returncode == 0, result.tail()
    assert not result.leftovers
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1] and {r["global_step"] for r in ranks.values()} == {STEPS // 2}
    for rank in (0, 1):
        engine = engine_of(tmp_path, rank)
        assert engine["ds_accelerator"] == "cpu"  # the Trainer's accelerator, set before deepspeed chose
        assert engine["backend"] == "gloo"  # torchplug's process group, used as it is
        assert engine["zero_stage"] == stage
        config = engine["config"]
        assert (config["gradient_accumulation_steps"], config["managed_gradient_accumulation"]) == (1, False)
        assert config["gradient_clipping"] == float(CLIP)
        assert config["train_micro_batch_size_per_gpu"] == 8  # the DataLoader's batch size
    expected = reference_state(epochs=2, accumulate=int(ACCUMULATE), clip=float(CLIP))
    assert_close_states(torch.load(tmp_path / "rank0.pt"), expected)
    if stage == 3:
        assert ranks[1]["hash"] is None  # gathered on rank 0 only


def test_offload_moves_the_optimizer_step_to_the_cpu_optimizer(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "deepspeed_stage_2_offload", "--max-steps", "1")
    assert result.returncode == 0, result.tail()
    zero = engine_of(tmp_path)["config"]["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu"
    # On the CPU accelerator the torch optimizer already steps on the CPU: DeepSpeed's guard is off.
    assert engine_of(tmp_path)["config"]["zero_force_ds_cpu_optimizer"] is False


def test_bf16_mixed_is_deepspeeds_bf16_mode(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "deepspeed_stage_2", "--precision", "bf16-mixed")
    assert result.returncode == 0, result.tail()
    engine = engine_of(tmp_path)
    assert engine["config"]["bf16"] == {"enabled": True}
    assert engine["param_dtype"] == "torch.bfloat16"  # the engine holds the model in bfloat16
    assert engine["precision"] == "DeepSpeedPrecision('bf16-mixed')"
    assert engine["optimizer"] == "DeepSpeedZeroOptimizer"
    trained = torch.load(tmp_path / "rank0.pt")
    expected = reference_state(epochs=2)
    assert {v.dtype for v in trained.values()} == {torch.bfloat16}
    # bfloat16 keeps 8 bits of mantissa: close to the float32 result, not equal
    assert_close_states({k: v.float() for k, v in trained.items()}, expected, rtol=0.05, atol=0.02)


def test_checkpoint_directories_rotate_like_files(tmp_path: Path) -> None:
    result = train(
        tmp_path, "--strategy", "deepspeed_stage_2", "--checkpoint-dir", str(tmp_path / "ckpts"), "--keep", "2"
    )
    assert result.returncode == 0, result.tail()
    kept = sorted(p.name for p in (tmp_path / "ckpts").iterdir())
    assert kept == [f"epoch=1-step={STEPS - 1}.ckpt", f"epoch=1-step={STEPS}.ckpt"]
    for name in kept:
        directory = tmp_path / "ckpts" / name
        assert (directory / "latest").read_text().strip() == "checkpoint"
        assert (directory / "checkpoint" / "mp_rank_00_model_states.pt").is_file()
    assert not [p for p in (tmp_path / "ckpts").iterdir() if p.name.startswith(".")]  # no staging left behind


def test_layers_built_in_the_sharded_context_are_partitioned_at_creation(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "deepspeed_stage_3", "--sharded-head", "--max-steps", "2")
    assert result.returncode == 0, result.tail()
    for rank in (0, 1):
        assert json.loads((tmp_path / f"head_rank{rank}.json").read_text()) == {"partitioned": True}
    gathered = torch.load(tmp_path / "rank0.pt")
    assert gathered["head.weight"].shape == (1, 1) and gathered["net.0.weight"].shape == (64, 32)
