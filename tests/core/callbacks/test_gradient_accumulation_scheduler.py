"""GradientAccumulationScheduler: the number of batches per optimizer step changes with the epoch."""

from __future__ import annotations

import pytest
import torch

from tests.core.callbacks.conftest import reference_weights
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import GradientAccumulationScheduler, LambdaCallback

SCHEDULE = {1: 3, 3: 2}  # epoch 0: 1 batch per step, epochs 1-2: 3, epoch 3 on: 2


def accumulation(epoch: int) -> int:
    return 1 if epoch < 1 else 3 if epoch < 3 else 2


def test_trains_as_a_loop_that_accumulates_by_the_schedule(make_trainer, tiny_model, data):
    seen: list[int] = []
    record = LambdaCallback(on_train_epoch_end=lambda trainer, module: seen.append(trainer.accumulate_grad_batches))
    trainer = make_trainer(max_epochs=4, callbacks=[GradientAccumulationScheduler(SCHEDULE), record])
    model = tiny_model()
    trainer.fit(model, data())

    assert seen == [1, 3, 3, 2]
    assert trainer.global_step == 8 + 3 + 3 + 4  # 8 batches per epoch: the last batch of an epoch always steps
    expected = reference_weights(4, accumulation)
    for key, value in expected.items():
        torch.testing.assert_close(model.state_dict()[key], value)


def test_a_resume_in_the_middle_of_an_accumulating_epoch_continues_exactly(tmp_path, make_trainer, tiny_model, data):
    path = str(tmp_path / "mid.ckpt")

    def save_mid_epoch(trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 4:  # in the middle of an accumulation window
            trainer.save_checkpoint(path)

    make_trainer(
        max_epochs=2,
        callbacks=[GradientAccumulationScheduler(SCHEDULE), LambdaCallback(on_train_batch_end=save_mid_epoch)],
    ).fit(tiny_model(), data())
    resumed = tiny_model()
    make_trainer(max_epochs=4, callbacks=[GradientAccumulationScheduler(SCHEDULE)]).fit(resumed, data(), ckpt_path=path)

    for key, value in reference_weights(4, accumulation).items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_the_trainers_own_value_and_a_schedule_are_refused_together(make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=1, accumulate_grad_batches=4, callbacks=[GradientAccumulationScheduler(SCHEDULE)])
    with pytest.raises(
        MisconfigurationError, match=r"Trainer\(accumulate_grad_batches=4\) and a GradientAccumulationScheduler"
    ):
        trainer.fit(tiny_model(), data())


def test_manual_optimization_is_refused(make_trainer, tiny_model, data):
    model = tiny_model()
    model.automatic_optimization = False
    with pytest.raises(MisconfigurationError, match="automatic optimization only"):
        make_trainer(max_epochs=1, callbacks=[GradientAccumulationScheduler({0: 2})]).fit(model, data())


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [({}, "give at least one epoch"), ({-1: 2}, "the epoch -1 is not an int >= 0"), ({0: 0}, "accumulates 0 batches")],
    ids=["empty", "negative-epoch", "zero-batches"],
)
def test_bad_schedules_are_refused(scheduling, message):
    with pytest.raises(MisconfigurationError, match=message):
        GradientAccumulationScheduler(scheduling)


def test_the_value_of_an_epoch():
    scheduler = GradientAccumulationScheduler({2: 4, 5: 8})
    assert [scheduler.get_accumulate_grad_batches(e) for e in range(7)] == [1, 1, 4, 4, 4, 8, 8]
    assert scheduler.going_to_accumulate_grad_batches()
    assert not GradientAccumulationScheduler({0: 1}).going_to_accumulate_grad_batches()
