"""FSDP through every stage of a run, two real processes: fit with validation, then test, validate and predict.

Evaluation runs under ``torch.no_grad`` for FSDP even with ``Trainer(inference_mode=True)`` (FSDP
gathers parameters into buffers that training reuses, which inference tensors would freeze), and
the stages after ``fit`` use the module FSDP already sharded rather than sharding it again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import SCRIPTS, linux_only, run
from tests.core.strategies.scripts.common import dataset
from tests.core.strategies.scripts.stages import Evaluated
from torchplug.io import consolidate_checkpoint

pytestmark = [pytest.mark.slow, linux_only]


def _loss_of(checkpoint: Path, tmp_path: Path) -> float:
    """The test loss of the weights in ``checkpoint`` (a file, or a sharded directory), in this process."""
    if checkpoint.is_dir():
        consolidate_checkpoint(str(checkpoint), str(tmp_path / "whole.ckpt"))
        checkpoint = tmp_path / "whole.ckpt"
    model = Evaluated.load_from_checkpoint(str(checkpoint))
    x, y = dataset(16).tensors
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_sharded"])
def test_fsdp_validates_in_fit_then_tests_the_best_checkpoint(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run(
        [sys.executable, str(SCRIPTS / "stages.py"), "--out", str(out), "--strategy", strategy], tmp_path / "log"
    )
    assert result.returncode == 0, result.tail()
    stages = json.loads((out / "stages.json").read_text())
    assert stages["tested_path"] == stages["best"] != ""
    assert Path(stages["validated_path"]).name.startswith("last")
    assert stages["tested"][0]["test_loss"] == pytest.approx(_loss_of(Path(stages["best"]), tmp_path), rel=1e-5)
    assert stages["validated"][0]["val_loss"] == pytest.approx(
        _loss_of(Path(stages["validated_path"]), tmp_path), rel=1e-5
    )
    assert stages["predicted"] == 1  # 16 samples in batches of 8 over 2 processes: one batch each
