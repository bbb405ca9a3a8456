"""``hpu_single``: one (fake) HPU in this process, marking steps for lazy mode, checkpoints from CPU copies."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

import torchplug
from tests.accel_hpu.models import Regressor, loader, quiet, reference_weights, weights
from torchplug_hpu import HPUSingleStrategy

pytestmark = pytest.mark.usefixtures("fake_habana")


def test_one_hpu_trains_like_the_reference_and_marks_each_step(tmp_path: Path, fake_state: ModuleType) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="hpu", **quiet(tmp_path, max_epochs=2))
    trainer.fit(model, loader())
    assert type(trainer.strategy) is HPUSingleStrategy
    assert model.device == torch.device("hpu")
    assert weights(model) == pytest.approx(reference_weights(), abs=1e-6)
    assert fake_state.mark_steps == 2 * trainer.global_step == 16  # after backward, after the optimizer step


def test_validate_test_and_predict_run_on_the_hpu(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="hpu", **quiet(tmp_path))
    assert trainer.validate(model, loader(), verbose=False)[0]["val_loss"] > 0
    predictions = trainer.predict(model, loader(n=32))
    assert [p.shape for p in predictions] == [torch.Size([16, 1])] * 2


def test_checkpoints_are_written_from_cpu_copies(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="hpu", **quiet(tmp_path, enable_checkpointing=True))
    trainer.fit(model, loader())
    saved = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    assert saved["state_dict"]["layer.weight"].device == torch.device("cpu")
    assert saved["global_step"] == 4


def test_the_strategy_maps_precisions_and_describes_itself() -> None:
    strategy = HPUSingleStrategy()
    assert strategy.precision_for("bf16-mixed") == "hpu-bf16-mixed"
    assert strategy.root_device == torch.device("hpu")
    assert repr(strategy) == "HPUSingleStrategy()"
    assert repr(HPUSingleStrategy(device="hpu")) == "HPUSingleStrategy(device=hpu)"
