"""A NaN or infinite monitored value is never "best": ModelCheckpoint and EarlyStopping pass over it."""

from __future__ import annotations

import math
import os

import pytest

from torchplug.callbacks import EarlyStopping, ModelCheckpoint


@pytest.mark.parametrize(
    ("mode", "scores", "kept", "best"),
    [
        ("min", [math.nan, 3.0, math.nan, 1.0], ["epoch=1.ckpt", "epoch=3.ckpt"], "epoch=3.ckpt"),
        ("max", [math.nan, 3.0, math.inf, 1.0], ["epoch=1.ckpt", "epoch=3.ckpt"], "epoch=1.ckpt"),
        ("min", [2.0, -math.inf, 1.0, math.nan], ["epoch=0.ckpt", "epoch=2.ckpt"], "epoch=2.ckpt"),
    ],
    ids=["nan-min", "nan-and-inf-max", "minus-inf-min"],
)
def test_a_nonfinite_monitor_never_enters_the_top_k(tmp_path, make_trainer, tiny_model, data, mode, scores, kept, best):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpts", filename="{epoch}", monitor="score", mode=mode, save_top_k=2
    )
    trainer = make_trainer(max_epochs=len(scores), callbacks=[checkpoint])
    with pytest.warns(UserWarning, match=r"ModelCheckpoint\(monitor='score'\): score = .* is not finite"):
        trainer.fit(tiny_model(scores=scores), data(), data())

    assert sorted(os.listdir(tmp_path / "ckpts")) == kept
    assert os.path.basename(checkpoint.best_model_path) == best
    assert math.isfinite(float(checkpoint.best_model_score))
    assert all(math.isfinite(float(score)) for score in checkpoint.best_k_models.values())


def test_a_first_epoch_with_a_nan_monitor_reports_no_best_checkpoint(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="score", save_last=True)
    trainer = make_trainer(max_epochs=1, callbacks=[checkpoint])
    with pytest.warns(UserWarning, match="best_model_path stays 'unset'"):
        trainer.fit(tiny_model(scores=[math.nan]), data(), data())

    assert checkpoint.best_model_path == ""
    assert checkpoint.best_model_score is None
    assert os.listdir(tmp_path / "ckpts") == ["last.ckpt"]  # the run's state is still saved, as the last one


@pytest.mark.parametrize("mode", ["min", "max"])
def test_early_stopping_without_check_finite_never_takes_nan_as_best(make_trainer, tiny_model, data, mode):
    stopping = EarlyStopping(monitor="score", patience=2, check_finite=False, mode=mode)
    trainer = make_trainer(max_epochs=4, callbacks=[stopping])
    trainer.fit(tiny_model(scores=[1.0, math.nan, math.nan, 1.0]), data(), data())

    assert float(stopping.best_score) == 1.0
    assert stopping.stopped_epoch == 2  # two records without improvement: the NaNs
