"""A step or hook set to ``None`` on a module is turned off, as in Lightning: the loops never call ``None``."""

from __future__ import annotations

import pytest

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet
from torchplug import MisconfigurationError


class Counting(Classifier):
    """The classifier, counting its validation steps."""

    def __init__(self) -> None:
        super().__init__()
        self.validation_steps = 0

    def validation_step(self, batch, batch_idx):
        self.validation_steps += 1
        return super().validation_step(batch, batch_idx)


def test_validation_step_none_turns_validation_off_in_fit() -> None:
    model = Counting()
    model.validation_step = None
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=2, num_sanity_val_steps=2))

    with pytest.warns(UserWarning, match="Validation is skipped"):
        trainer.fit(model, datamodule=BlobData())

    assert model.validation_steps == 0
    assert trainer.global_step == 2
    assert not trainer.enable_validation
    assert "val_loss" not in trainer.callback_metrics


@pytest.mark.parametrize(
    ("step", "call", "message"),
    [
        ("validation_step", "validate", r"trainer\.validate\(\) needs Classifier\.validation_step.*set to None"),
        ("test_step", "test", r"trainer\.test\(\) needs Classifier\.test_step.*set to None"),
        ("predict_step", "predict", r"trainer\.predict\(\) needs Classifier\.predict_step, which is set to None"),
        ("training_step", "fit", r"trainer\.fit\(\) needs Classifier\.training_step.*set to None"),
    ],
    ids=["validate", "test", "predict", "fit"],
)
def test_a_step_set_to_none_refuses_the_call_that_needs_it(step: str, call: str, message: str) -> None:
    model = Classifier()
    setattr(model, step, None)
    trainer = torchplug.Trainer(**quiet(max_epochs=1))

    with pytest.raises(MisconfigurationError, match=message):
        getattr(trainer, call)(model, datamodule=BlobData())


def test_a_hook_set_to_none_is_not_called() -> None:
    model = Classifier()
    model.on_train_epoch_end = None  # an instance attribute, as a test harness would set it
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=2, limit_val_batches=1))

    trainer.fit(model, datamodule=BlobData())

    assert trainer.current_epoch == 1


def test_a_callback_hook_set_to_none_is_not_called() -> None:
    class Recorder(torchplug.Callback):
        def __init__(self) -> None:
            self.calls = 0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.calls += 1

    on, off = Recorder(), Recorder()
    off.on_train_batch_end = None
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=2, callbacks=[on, off]))

    trainer.fit(Classifier(), datamodule=BlobData())

    assert (on.calls, off.calls) == (2, 0)
