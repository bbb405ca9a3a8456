"""``core fit`` with a DeepSpeed strategy, over two real processes (the command re-runs itself for rank 1)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.core.cli.conftest import REPO_ROOT, TINY
from tests.core.strategies.runner import environment, run
from torchplug_deepspeed import consolidate

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("deepspeed_ops")]


def test_core_fit_trains_with_zero_stage_3_over_two_processes(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"""
trainer:
  accelerator: cpu
  devices: 2
  strategy: deepspeed_stage_3
  max_epochs: 2
  enable_progress_bar: false
  default_root_dir: {tmp_path}
model: {TINY}.TinyModel
data: {TINY}.TinyData
""")
    command = [sys.executable, "-m", "torchplug", "fit", "--config", str(config), "--seed_everything=1"]
    result = run(command, tmp_path / "output.log", cwd=REPO_ROOT, env=environment())
    assert result.returncode == 0, result.tail()
    assert not result.leftovers
    # 64 samples, 32 per rank in batches of 16: 2 steps per epoch; one summary, from rank 0.
    assert result.output.count("fit: 2 epoch(s), 4 step(s)") == 1, result.tail()
    (version,) = tmp_path.glob("torchplug_logs/version_*")
    (checkpoint,) = version.glob("checkpoints/*.ckpt")
    assert checkpoint.is_dir() and (checkpoint / "checkpoint").is_dir()  # DeepSpeed's shards
    written = consolidate(checkpoint, tmp_path / "model.ckpt")
    sys.path.insert(0, str(REPO_ROOT))
    from tests.core.cli.tiny import TinyModel

    model = TinyModel.load_from_checkpoint(written)
    assert model.hparams.hidden == 8


def test_core_fit_refuses_a_precision_deepspeed_does_not_have(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "torchplug",
        "fit",
        f"--model={TINY}.TinyModel",
        f"--data={TINY}.TinyData",
        "--trainer.accelerator=cpu",
        "--trainer.strategy=deepspeed_stage_2",
        "--trainer.precision=64-true",
    ]
    result = run(command, tmp_path / "output.log", cwd=REPO_ROOT, env=environment(), timeout=120)
    assert result.returncode == 2, result.tail()
    assert "precision='64-true' is not supported by DeepSpeed" in result.output
    assert "Traceback" not in result.output
