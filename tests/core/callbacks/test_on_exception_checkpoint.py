"""OnExceptionCheckpoint: a run that fails leaves a checkpoint to resume from, exactly."""

from __future__ import annotations

import os

import pytest
import torch

from tests.core.callbacks.conftest import reference_weights
from torchplug.callbacks import LambdaCallback, OnExceptionCheckpoint


def fail_at_step(step: int, error: BaseException) -> LambdaCallback:
    def check(trainer, module, batch, batch_idx):
        if trainer.global_step == step:
            raise error

    return LambdaCallback(on_train_batch_start=check)


@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_the_checkpoint_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, make_trainer, tiny_model, data, error):
    callback = OnExceptionCheckpoint(dirpath=tmp_path / "crash")
    with pytest.raises(type(error)):
        make_trainer(max_epochs=2, callbacks=[callback, fail_at_step(11, error)]).fit(tiny_model(), data())

    assert callback.ckpt_path == f"{tmp_path}/crash/on_exception.ckpt"
    assert torch.load(callback.ckpt_path, weights_only=True)["global_step"] == 11
    resumed = tiny_model()
    make_trainer(max_epochs=2).fit(resumed, data(), ckpt_path=callback.ckpt_path)
    for key, value in reference_weights(2).items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_a_successful_fit_removes_a_stale_one_but_validate_keeps_it(tmp_path, make_trainer, tiny_model, data):
    callback = OnExceptionCheckpoint(dirpath=tmp_path, filename="failed")
    with pytest.raises(RuntimeError):
        make_trainer(max_epochs=1, callbacks=[callback, fail_at_step(3, RuntimeError("x"))]).fit(tiny_model(), data())
    assert os.path.exists(callback.ckpt_path)

    trainer = make_trainer(max_epochs=1, callbacks=[callback])
    trainer.validate(tiny_model(), data(), verbose=False)
    assert os.path.exists(callback.ckpt_path)  # validating a model must not throw away a failed fit's state

    trainer.fit(tiny_model(), data())
    assert not os.path.exists(callback.ckpt_path)  # a finished fit: nothing to resume any more


def test_a_failure_before_training_is_reported_without_hiding_the_original(tmp_path, make_trainer, tiny_model, data):
    def broken(trainer, module):
        raise ValueError("bad data")

    callback = OnExceptionCheckpoint(dirpath=tmp_path)
    with pytest.raises(ValueError, match="bad data"):
        make_trainer(max_epochs=1, callbacks=[callback, LambdaCallback(on_train_start=broken)]).fit(
            tiny_model(), data()
        )
    assert torch.load(callback.ckpt_path, weights_only=True)["global_step"] == 0


def test_model_checkpoint_save_on_exception_resumes_to_an_uninterrupted_run(
    tmp_path, make_trainer, tiny_model, data, torchplug_log
):
    from torchplug.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_on_exception=True, save_last=True)
    with pytest.raises(RuntimeError, match="disk on fire"):
        make_trainer(max_epochs=2, callbacks=[checkpoint, fail_at_step(11, RuntimeError("disk on fire"))]).fit(
            tiny_model(), data()
        )

    path = f"{tmp_path}/ckpts/epoch=1-step=11.ckpt"  # named by the filename template, as Lightning names it
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["epoch=0-step=8.ckpt", "epoch=1-step=11.ckpt", "last.ckpt"]
    assert torch.load(path, weights_only=True)["global_step"] == 11
    assert torch.load(checkpoint.last_model_path, weights_only=True)["global_step"] == 11
    said = torchplug_log.text
    assert f"fit() raised RuntimeError: disk on fire. The checkpoint of global step 11 was written to {path}" in said

    resumed = tiny_model()
    make_trainer(max_epochs=2).fit(resumed, data(), ckpt_path=path)
    for key, value in reference_weights(2).items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_model_checkpoint_save_on_exception_names_the_checkpoint_of_that_step_when_it_exists(
    tmp_path, make_trainer, tiny_model, data, torchplug_log
):
    from torchplug.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_on_exception=True, every_n_train_steps=4)
    with pytest.raises(ValueError):
        make_trainer(max_epochs=1, callbacks=[checkpoint, fail_at_step(4, ValueError("bad batch"))]).fit(
            tiny_model(), data()
        )
    assert os.listdir(tmp_path) == ["epoch=0-step=4.ckpt"]  # nothing trained since that save: no second file
    assert f"The checkpoint of global step 4 is already {tmp_path}/epoch=0-step=4.ckpt" in torchplug_log.text


def test_model_checkpoint_without_save_on_exception_writes_nothing_on_an_error(
    tmp_path, make_trainer, tiny_model, data
):
    from torchplug.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=5)
    with pytest.raises(RuntimeError):
        make_trainer(max_epochs=1, callbacks=[checkpoint, fail_at_step(3, RuntimeError("x"))]).fit(tiny_model(), data())
    assert os.listdir(tmp_path) == []
