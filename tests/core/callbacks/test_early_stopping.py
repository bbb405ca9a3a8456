"""EarlyStopping: when fit stops, why, and what a checkpoint remembers."""

from __future__ import annotations

import math

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import EarlyStopping, ModelCheckpoint
from torchplug.callbacks.early_stopping import EarlyStoppingReason


def fit(make_trainer, tiny_model, data, scores, stopping, **trainer_kwargs):
    trainer = make_trainer(max_epochs=len(scores), callbacks=[stopping], **trainer_kwargs)
    trainer.fit(tiny_model(scores=scores), data(), data())
    return trainer


def test_stops_after_patience_checks_without_an_improvement_of_min_delta(make_trainer, tiny_model, data):
    # 0.95 and 0.92 improve on 1.0, but by less than min_delta=0.1: they do not count.
    stopping = EarlyStopping(monitor="score", patience=2, min_delta=0.1)
    trainer = fit(make_trainer, tiny_model, data, [1.0, 0.95, 0.92, 0.5, 0.1], stopping)

    assert trainer.current_epoch == 3  # epochs 0, 1 and 2 ran
    assert stopping.stopped_epoch == 2
    assert stopping.wait_count == 2
    assert float(stopping.best_score) == 1.0
    assert stopping.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert stopping.stopping_reason_message == (
        "Monitored metric score did not improve in the last 2 records. Best score: 1. Signaling Trainer to stop."
    )


def test_improvements_reset_the_count(make_trainer, tiny_model, data):
    stopping = EarlyStopping(monitor="score", patience=2, mode="max")
    trainer = fit(make_trainer, tiny_model, data, [1.0, 0.5, 2.0, 1.5, 3.0, 2.5], stopping)

    assert trainer.current_epoch == 6  # never two checks in a row without improvement
    assert stopping.stopping_reason is EarlyStoppingReason.NOT_STOPPED
    assert stopping.stopping_reason_message is None
    assert float(stopping.best_score) == 3.0


@pytest.mark.parametrize(
    ("kwargs", "scores", "stopped_epoch", "reason"),
    [
        ({"mode": "max", "stopping_threshold": 0.9}, [0.5, 0.8, 0.95, 0.99], 2, "Stopping threshold reached: score"),
        ({"divergence_threshold": 10.0}, [1.0, 2.0, 50.0, 1.0], 2, "Divergence threshold reached: score = 50 > 10"),
        ({}, [1.0, math.nan, 0.5, 0.4], 1, "Monitored metric score = nan is not finite"),
        ({}, [1.0, math.inf, 0.5, 0.4], 1, "score = inf is not finite"),
    ],
    ids=["stopping-threshold", "divergence-threshold", "nan", "inf"],
)
def test_thresholds_and_non_finite_values_stop_at_once(
    make_trainer, tiny_model, data, kwargs, scores, stopped_epoch, reason
):
    stopping = EarlyStopping(monitor="score", patience=10, **kwargs)
    fit(make_trainer, tiny_model, data, scores, stopping)

    assert stopping.stopped_epoch == stopped_epoch
    assert reason in stopping.stopping_reason_message
    assert stopping.stopping_reason is {
        "Stopping": EarlyStoppingReason.STOPPING_THRESHOLD,
        "Divergence": EarlyStoppingReason.DIVERGENCE_THRESHOLD,
    }.get(reason.split()[0], EarlyStoppingReason.NON_FINITE_METRIC)


def test_check_finite_false_treats_nan_as_no_improvement(make_trainer, tiny_model, data):
    stopping = EarlyStopping(monitor="score", patience=5, check_finite=False)
    trainer = fit(make_trainer, tiny_model, data, [1.0, math.nan, 0.5], stopping)
    assert trainer.current_epoch == 3
    assert stopping.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_min_epochs_holds_the_stop_back(make_trainer, tiny_model, data):
    stopping = EarlyStopping(monitor="score", patience=1)
    trainer = fit(make_trainer, tiny_model, data, [1.0, 2.0, 3.0, 4.0, 5.0], stopping, min_epochs=4)
    assert stopping.stopped_epoch >= 1
    assert trainer.current_epoch == 4


def test_checks_the_training_metric_when_there_is_no_validation(make_trainer, tiny_model, data):
    stopping = EarlyStopping(monitor="train_loss_epoch", stopping_threshold=10.0)  # the first epoch is enough
    trainer = make_trainer(max_epochs=5, callbacks=[stopping])
    trainer.fit(tiny_model(), data())
    assert trainer.current_epoch == 1


def test_checks_after_each_validation_when_it_runs_twice_per_epoch(make_trainer, tiny_model, data):
    stopping = EarlyStopping(monitor="val_loss", stopping_threshold=1e9)
    trainer = make_trainer(max_epochs=3, val_check_interval=0.5, callbacks=[stopping])
    trainer.fit(tiny_model(), data(), data())
    assert trainer.global_step == 4  # stopped at the first validation, mid-epoch


@pytest.mark.parametrize(
    ("stopping_kwargs", "trainer_kwargs", "with_validation", "reason"),
    [
        ({"check_on_train_epoch_end": False}, {}, False, "this fit runs no validation"),
        ({}, {"check_val_every_n_epoch": 5}, True, "check_val_every_n_epoch=5 puts the next validation in epoch 4"),
    ],
    ids=["check-after-validation-without-validation", "validation-after-max-epochs"],
)
def test_checking_only_after_a_validation_that_never_runs_is_warned(
    make_trainer, tiny_model, data, stopping_kwargs, trainer_kwargs, with_validation, reason
):
    stopping = EarlyStopping(monitor="train_loss", patience=0, **stopping_kwargs)
    trainer = make_trainer(max_epochs=3, callbacks=[stopping], enable_checkpointing=False, **trainer_kwargs)
    loaders = (data(), data()) if with_validation else (data(),)
    with pytest.warns(UserWarning, match=rf"checks after validation, but {reason}.*never stop this fit.*Hint"):
        trainer.fit(tiny_model(), *loaders)
    assert trainer.current_epoch == 3  # patience=0 would have stopped it after the first check


def test_missing_metric_raises_or_warns(make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=2, callbacks=[EarlyStopping(monitor="val_acc")])
    with pytest.raises(MisconfigurationError, match=r"monitor='val_acc'.*Logged metrics: .*val_loss.*strict=False"):
        trainer.fit(tiny_model(), data(), data())

    trainer = make_trainer(max_epochs=2, callbacks=[EarlyStopping(monitor="val_acc", strict=False)])
    with pytest.warns(UserWarning, match="found no metric 'val_acc'"):
        trainer.fit(tiny_model(), data(), data())
    assert trainer.current_epoch == 2


def test_state_round_trips_through_a_checkpoint(tmp_path, make_trainer, tiny_model, data):
    scores = [1.0, 2.0, 3.0, 0.5, 0.6, 0.7, 0.8]
    stopping = EarlyStopping(monitor="score", patience=3)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    make_trainer(max_epochs=3, callbacks=[stopping, checkpoint]).fit(tiny_model(scores=scores), data(), data())

    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["callbacks"][stopping.state_key]
    assert saved == {"wait_count": 2, "stopped_epoch": 0, "best_score": torch.tensor(1.0), "patience": 3}

    # Resumed, the count goes on: 0.5 improves (count 0), then 3 checks without improvement stop it.
    resumed = EarlyStopping(monitor="score", patience=3)
    trainer = make_trainer(
        max_epochs=7, callbacks=[resumed, ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)]
    )
    trainer.fit(tiny_model(scores=scores), data(), data(), ckpt_path="last")
    assert resumed.stopped_epoch == 6
    assert float(resumed.best_score) == 0.5


def test_a_resumed_fit_keeps_the_patience_it_was_given(tmp_path, make_trainer, tiny_model, data):
    scores = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    make_trainer(max_epochs=2, callbacks=[EarlyStopping(monitor="score", patience=2), checkpoint]).fit(
        tiny_model(scores=scores), data(), data()
    )  # one check without improvement so far

    resumed = EarlyStopping(monitor="score", patience=4)
    trainer = make_trainer(
        max_epochs=6, callbacks=[resumed, ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)]
    )
    with pytest.warns(UserWarning, match=r"patience=4\): the checkpoint was written with patience=2; this run keeps"):
        trainer.fit(tiny_model(scores=scores), data(), data(), ckpt_path="last")
    assert resumed.patience == 4
    assert resumed.stopped_epoch == 4  # the 4th check without improvement; patience=2 would have stopped in epoch 2


def test_state_keys_differ_per_metric():
    assert EarlyStopping(monitor="a").state_key != EarlyStopping(monitor="b").state_key


def test_two_with_the_same_state_key_are_refused(make_trainer):
    # A checkpoint would hold one of the two states, and a resume would give it to both.
    impatient, patient = EarlyStopping(monitor="val_loss", patience=1), EarlyStopping(monitor="val_loss", patience=5)
    with pytest.raises(
        MisconfigurationError,
        match=r"callbacks= holds EarlyStopping\(.*patience=1.*\) and EarlyStopping\(.*patience=5.*\), which both keep "
        r"their state in checkpoints under state_key=.*Hint: make them differ",
    ):
        make_trainer(callbacks=[impatient, patient])

    make_trainer(callbacks=[impatient, EarlyStopping(monitor="val_loss", mode="max")])  # keys differ: accepted


def test_two_with_the_same_state_key_from_configure_callbacks_are_refused(make_trainer, tiny_model, data):
    class TwoStoppers(type(tiny_model())):
        def configure_callbacks(self):
            return [EarlyStopping(monitor="val_loss", patience=1), EarlyStopping(monitor="val_loss", patience=5)]

    trainer = make_trainer(max_epochs=1)
    with pytest.raises(MisconfigurationError, match=r"callbacks= with TwoStoppers.configure_callbacks\(\) holds"):
        trainer.fit(TwoStoppers(), data(), data())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "avg"}, "mode='avg'"),
        ({"patience": -1}, "patience=-1"),
        ({"min_delta": -0.1}, "min_delta=-0.1"),
        ({"min_delta": math.nan}, "min_delta=nan"),
        ({"min_delta": "0.1"}, "min_delta='0.1'"),
        ({"stopping_threshold": "0.1"}, "stopping_threshold='0.1'"),
        ({"divergence_threshold": math.nan}, "divergence_threshold=nan"),
    ],
    ids=["mode", "patience", "min-delta", "min-delta-nan", "min-delta-str", "stopping-threshold-str", "divergence-nan"],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(MisconfigurationError, match=rf"EarlyStopping\({match}\) is not valid: .*Hint"):
        EarlyStopping(monitor="val_loss", **kwargs)


def test_verbose_logs_the_reasons(make_trainer, tiny_model, data, torchplug_log):
    fit(make_trainer, tiny_model, data, [1.0, 2.0, 3.0], EarlyStopping(monitor="score", patience=1, verbose=True))
    out = torchplug_log.text
    assert "Metric score improved. New best score: 1" in out
    assert "did not improve in the last 1 records" in out


def test_positional_arguments_mean_what_they_mean_in_lightning():
    # Lightning 2.6: (monitor, min_delta, patience, verbose, mode, strict, check_finite,
    # stopping_threshold, divergence_threshold, check_on_train_epoch_end, log_rank_zero_only)
    stopping = EarlyStopping("val_acc", 0.01, 5, True, "max", False, False, 0.99, 0.1, True, True)
    assert (stopping.monitor, stopping.min_delta, stopping.patience, stopping.verbose) == ("val_acc", 0.01, 5, True)
    assert (stopping.mode, stopping.strict, stopping.check_finite) == ("max", False, False)
    assert (stopping.stopping_threshold, stopping.divergence_threshold) == (0.99, 0.1)
    assert (stopping._check_on_train_epoch_end, stopping.log_rank_zero_only) == (True, True)


@pytest.mark.parametrize("name", ["verbose", "strict", "check_finite", "log_rank_zero_only"])
def test_a_switch_that_is_not_a_bool_is_refused_by_name(name):
    with pytest.raises(MisconfigurationError, match=rf"EarlyStopping\({name}='False'\): give True or False"):
        EarlyStopping(monitor="val_loss", **{name: "False"})


@pytest.mark.parametrize("monitor", [None, "", 3])
def test_a_monitor_that_is_not_a_metric_name_is_refused(monitor):
    with pytest.raises(MisconfigurationError, match=rf"EarlyStopping\(monitor={monitor!r}\) is not valid"):
        EarlyStopping(monitor=monitor)


@pytest.mark.parametrize(("mode", "stop", "diverge"), [("min", 1.0, 0.5), ("max", 0.1, 0.9)])
def test_thresholds_that_cross_are_refused_since_every_value_would_stop(mode, stop, diverge):
    with pytest.raises(
        MisconfigurationError, match=rf"stopping_threshold={stop}, divergence_threshold={diverge}\) stops"
    ):
        EarlyStopping(monitor="val_loss", mode=mode, stopping_threshold=stop, divergence_threshold=diverge)


@pytest.mark.parametrize(("mode", "stop", "diverge"), [("min", 0.1, 5.0), ("max", 0.9, 0.1), ("min", 1.0, 1.0)])
def test_thresholds_on_their_own_sides_are_accepted(mode, stop, diverge):
    EarlyStopping(monitor="val_loss", mode=mode, stopping_threshold=stop, divergence_threshold=diverge)


def test_the_reasons_are_lightnings_members_and_values() -> None:
    assert {reason.name: reason.value for reason in EarlyStoppingReason} == {
        "NOT_STOPPED": 0,
        "STOPPING_THRESHOLD": 1,
        "DIVERGENCE_THRESHOLD": 2,
        "PATIENCE_EXHAUSTED": 3,
        "NON_FINITE_METRIC": 4,
    }
    assert EarlyStopping(monitor="score").stopping_reason is EarlyStoppingReason.NOT_STOPPED
