"""A NaN or infinite monitored value is never "best": ModelCheckpoint ranks it last, EarlyStopping passes over it.

ModelCheckpoint saves as Lightning does (a NaN is ranked worst: kept while the top k has room,
displaced by any finite value); unlike Lightning, such a checkpoint never becomes
``best_model_path`` (Lightning's "best" of a run whose values are all NaN is a NaN checkpoint).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

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
def test_a_nonfinite_monitor_ranks_last_and_is_never_best(
    tmp_path, make_trainer, tiny_model, data, mode, scores, kept, best
):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpts", filename="{epoch}", monitor="score", mode=mode, save_top_k=2
    )
    trainer = make_trainer(max_epochs=len(scores), callbacks=[checkpoint])
    with pytest.warns(UserWarning, match=r"ModelCheckpoint\(monitor='score'\): score = .* is not finite.*ranks last"):
        trainer.fit(tiny_model(scores=scores), data(), data())

    assert sorted(os.listdir(tmp_path / "ckpts")) == kept
    assert os.path.basename(checkpoint.best_model_path) == best
    assert math.isfinite(float(checkpoint.best_model_score))
    assert all(math.isfinite(float(score)) for score in checkpoint.best_k_models.values())


@pytest.mark.parametrize(("mode", "worst"), [("min", math.inf), ("max", -math.inf)])
def test_nan_values_only_are_saved_as_in_lightning_but_none_is_best(
    tmp_path, make_trainer, tiny_model, data, mode, worst
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="score", mode=mode, save_last=True)
    trainer = make_trainer(max_epochs=2, callbacks=[checkpoint])
    with pytest.warns(UserWarning, match="best_model_path stays 'unset'"):
        trainer.fit(tiny_model(scores=[math.nan, math.nan]), data(), data())

    # As in Lightning: the first NaN fills the free place of the top 1 (the second has none), scored worst.
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["epoch=0-step=8.ckpt", "last.ckpt"]
    assert isinstance(checkpoint.best_model_score, torch.Tensor) and float(checkpoint.best_model_score) == worst
    assert checkpoint.best_model_path == ""  # unlike Lightning: a NaN checkpoint is never the best one


def test_a_first_nan_is_saved_then_displaced_as_lightning_counts_saves(
    tmp_path, make_trainer, tiny_model, data, recording_io
):
    """Lightning saves four times on (NaN, 8, 7, 5) with save_top_k=1: the NaN checkpoint fills the empty top 1."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", filename="{epoch}", monitor="score")
    trainer = make_trainer(max_epochs=4, callbacks=[checkpoint], plugins=[recording_io])
    with pytest.warns(UserWarning, match="is not finite"):
        trainer.fit(tiny_model(scores=[math.nan, 8.0, 7.0, 5.0]), data(), data())

    assert [os.path.basename(p) for p in recording_io.paths("save")] == [f"epoch={e}.ckpt" for e in range(4)]
    assert os.listdir(tmp_path / "ckpts") == ["epoch=3.ckpt"]
    assert float(checkpoint.best_model_score) == 5.0


@pytest.mark.parametrize("mode", ["min", "max"])
def test_early_stopping_without_check_finite_never_takes_nan_as_best(make_trainer, tiny_model, data, mode):
    stopping = EarlyStopping(monitor="score", patience=2, check_finite=False, mode=mode)
    trainer = make_trainer(max_epochs=4, callbacks=[stopping])
    trainer.fit(tiny_model(scores=[1.0, math.nan, math.nan, 1.0]), data(), data())

    assert float(stopping.best_score) == 1.0
    assert stopping.stopped_epoch == 2  # two records without improvement: the NaNs
