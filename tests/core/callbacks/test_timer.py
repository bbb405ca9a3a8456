"""Timer: stops training after a duration (also across a resume), and times each stage."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import LambdaCallback, Timer


def slow_steps(seconds: float) -> LambdaCallback:
    return LambdaCallback(on_train_batch_start=lambda trainer, module, batch, batch_idx: time.sleep(seconds))


def test_stops_training_once_the_duration_has_passed(make_trainer, tiny_model, data):
    timer = Timer(duration=timedelta(seconds=0.3))
    trainer = make_trainer(max_epochs=100, callbacks=[slow_steps(0.05), timer])
    trainer.fit(tiny_model(), data())

    assert 3 <= trainer.global_step < 100  # stopped after about 0.3 s, far before 100 epochs of 8 steps
    assert timer.time_elapsed("train") >= 0.3
    assert timer.time_remaining() <= 0


def test_epoch_interval_stops_at_an_epoch_end(make_trainer, tiny_model, data):
    trainer = make_trainer(
        max_epochs=100, callbacks=[slow_steps(0.05), Timer(duration={"seconds": 0.2}, interval="epoch")]
    )
    trainer.fit(tiny_model(), data())
    assert trainer.global_step == 8  # the first epoch took longer than the limit: the end of that epoch


def test_times_every_stage(make_trainer, tiny_model, data):
    timer = Timer()
    trainer = make_trainer(max_epochs=1, callbacks=[timer])
    model = tiny_model()
    trainer.fit(model, data(), data())
    trainer.test(model, data(), verbose=False)

    for stage in ("train", "validate", "test"):
        assert timer.time_elapsed(stage) > 0
        assert timer.start_time(stage) is not None and timer.end_time(stage) is not None
    assert timer.time_remaining() is None  # no duration


def test_a_resumed_fit_counts_the_time_already_spent(tmp_path, make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=2, callbacks=[slow_steps(0.02), Timer()])
    trainer.fit(tiny_model(), data())
    trainer.save_checkpoint(tmp_path / "done.ckpt")
    spent = torch.load(tmp_path / "done.ckpt", weights_only=True)["callbacks"]["Timer"]["time_elapsed"]["train"]
    assert spent >= 16 * 0.02

    resumed = make_trainer(max_epochs=10, callbacks=[Timer(duration=timedelta(seconds=spent / 2))])
    resumed.fit(tiny_model(), data(), ckpt_path=str(tmp_path / "done.ckpt"))
    assert resumed.global_step == 16  # the limit was used up before: no new step


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("01:02:03:04", 93784.0),
        ("0:1:30:0", 5400.0),
        ("00:36:00:00", 129600.0),
        (timedelta(minutes=2), 120.0),
        ({"hours": 1, "minutes": 30}, 5400.0),
        (None, None),
    ],
    ids=["DD:HH:MM:SS", "one-digit-fields", "36-hours", "timedelta", "dict", "none"],
)
def test_durations(duration: Any, seconds: float | None):
    assert Timer(duration=duration).duration == seconds


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration": "12:00"}, r"duration='12:00' is not a duration: give \"DD:HH:MM:SS\""),
        ({"duration": {"fortnights": 1}}, r"duration=\{'fortnights': 1\}: the dict's keys must be timedelta arguments"),
        ({"duration": 60}, r"duration=60 is not a duration"),
        ({"duration": "00:00:00:-1"}, r"duration='00:00:00:-1' is not a duration"),
        ({"interval": "batch"}, r"Timer\(interval='batch'\): choose 'step' or 'epoch'"),
    ],
    ids=["bad-string", "bad-dict", "bare-number", "negative", "bad-interval"],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        Timer(**kwargs)


def test_max_time_with_a_timer_in_callbacks_keeps_that_timer_and_says_so(make_trainer, torchplug_log):
    """Lightning keeps the user's Timer and leaves ``max_time`` unused, saying so at the info level."""
    own = Timer(duration={"hours": 1})
    trainer = make_trainer(max_time={"seconds": 5}, callbacks=[own])

    assert [c for c in trainer.callbacks if isinstance(c, Timer)] == [own]
    assert any(
        "max_time={'seconds': 5} is not used: callbacks= holds a Timer (a limit of 3600 s)" in message
        for message in torchplug_log.messages()
    )


def test_max_time_alone_adds_a_timer_with_that_limit(make_trainer):
    trainer = make_trainer(max_time="00:00:00:05")

    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    assert len(timers) == 1 and timers[0].duration == 5


def test_a_bad_max_time_is_refused_even_beside_a_timer(make_trainer):
    with pytest.raises(MisconfigurationError, match="max_time='soon' is not a duration"):
        make_trainer(max_time="soon", callbacks=[Timer()])
