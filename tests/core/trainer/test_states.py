"""``trainer.state``: Lightning's ``TrainerState`` (status, fn, stage) with ``finished`` and ``stopped``."""

from __future__ import annotations

import dataclasses

import pytest

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet
from torchplug.trainer.states import RunningStage, TrainerFn, TrainerState, TrainerStatus


def test_the_fields_are_lightnings_in_lightnings_order() -> None:
    assert [f.name for f in dataclasses.fields(TrainerState)] == ["status", "fn", "stage"]
    state = TrainerState(TrainerStatus.RUNNING, TrainerFn.FITTING, RunningStage.TRAINING)
    assert (state.status, state.fn, state.stage) == ("running", "fit", "train")


@pytest.mark.parametrize(
    ("status", "finished", "stopped"),
    [
        (TrainerStatus.INITIALIZING, False, False),
        (TrainerStatus.RUNNING, False, False),
        (TrainerStatus.FINISHED, True, True),
        (TrainerStatus.INTERRUPTED, False, True),
    ],
    ids=lambda value: value.value if isinstance(value, TrainerStatus) else str(value),
)
def test_finished_and_stopped_follow_the_status(status: TrainerStatus, finished: bool, stopped: bool) -> None:
    state = TrainerState(status=status)

    assert state.finished is finished
    assert state.stopped is stopped
    assert status.stopped is stopped


def test_only_validation_and_test_are_evaluating_stages() -> None:
    assert {stage for stage in RunningStage if stage.evaluating} == {RunningStage.VALIDATING, RunningStage.TESTING}


def test_a_fit_that_ran_to_its_end_is_finished() -> None:
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=2, limit_val_batches=1))
    assert trainer.state.status is TrainerStatus.INITIALIZING and not trainer.state.stopped

    trainer.fit(Classifier(), datamodule=BlobData())

    assert trainer.state.finished and trainer.state.stopped
    assert trainer.state.fn is TrainerFn.FITTING
    assert trainer.state.stage is None


def test_a_fit_that_raised_is_stopped_but_not_finished() -> None:
    class Failing(Classifier):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing(), datamodule=BlobData())

    assert trainer.state.stopped and not trainer.state.finished
    assert trainer.state.status is TrainerStatus.INTERRUPTED
