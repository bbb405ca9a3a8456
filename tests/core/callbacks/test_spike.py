"""SpikeDetection: a loss far above its running mean stops training, and the batches to skip are written down."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from tests.core.callbacks.conftest import TinyModel
from torchplug.callbacks import SpikeDetection, TrainingSpikeException


class Spiking(TinyModel):
    def __init__(self, at: int, factor: float) -> None:
        super().__init__()
        self.at = at
        self.factor = factor

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * self.factor if self.global_step == self.at else loss


def test_a_spike_stops_training_and_names_the_batches(tmp_path, make_trainer, data):
    torch.manual_seed(0)
    trainer = make_trainer(max_epochs=3, callbacks=[SpikeDetection(window=4, warmup=2, rtol=20.0)])
    with pytest.raises(TrainingSpikeException, match="Training spike detected in batch 5") as raised:
        trainer.fit(Spiking(at=13, factor=1000.0), data())

    assert raised.value.batch_idx == 5
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [4, 5]
    assert trainer.global_step == 14  # the spiking step was taken before the loss was read


def test_a_nan_loss_is_a_spike_with_finite_only(tmp_path, make_trainer, data):
    callback = SpikeDetection(exclude_batches_path=tmp_path / "skip.json")
    with pytest.raises(TrainingSpikeException):
        make_trainer(max_epochs=1, callbacks=[callback]).fit(Spiking(at=3, factor=math.nan), data())
    assert json.loads((tmp_path / "skip.json").read_text()) == [2, 3]


def test_without_finite_only_a_nan_is_left_out_of_the_mean(make_trainer, data):
    callback = SpikeDetection(finite_only=False, rtol=None, atol=1e6)
    make_trainer(max_epochs=1, callbacks=[callback], nonfinite_loss="ignore").fit(
        Spiking(at=3, factor=math.nan), data()
    )
    values = callback.state_dict()["values"]
    assert len(values) == 3 and all(math.isfinite(v) for v in values)  # the NaN (and all after it) left out


def test_ordinary_training_passes_and_the_window_survives_a_checkpoint(tmp_path, make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=2, callbacks=[SpikeDetection(window=5, rtol=10.0)])
    trainer.fit(tiny_model(), data())
    trainer.save_checkpoint(tmp_path / "done.ckpt")
    state = torch.load(tmp_path / "done.ckpt", weights_only=True)["callbacks"]["SpikeDetection"]

    restored = SpikeDetection(window=5)
    restored.load_state_dict(state)
    assert len(state["values"]) == 5
    assert restored.running_mean == pytest.approx(sum(state["values"]) / 5)
    assert restored.last_val == state["last_val"]


def test_mode_max_watches_for_drops():
    detector = SpikeDetection(mode="max", rtol=0.5)
    for value in (10.0, 10.0, 10.0):
        assert not detector._is_spike(value)
        detector._values.append(value)
        detector.last_val = value
    assert not detector._is_spike(12.0)  # an improvement
    assert detector._is_spike(2.0)
