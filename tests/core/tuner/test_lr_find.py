"""Tuner.lr_find and the LearningRateFinder callback: the range test, its suggestion and plot; nothing else changes."""

from __future__ import annotations

import itertools
import logging
import sys

import pytest
import torch

from tests.core.tuner.conftest import Regression, dataset, weights
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import LambdaCallback, LearningRateFinder
from torchplug.tuner import LRFinder, Tuner


def test_the_range_test_suggests_a_rate_and_changes_nothing_else(make_trainer, tmp_path):
    model = Regression(batch_size=16)
    before = weights(model)
    trainer = make_trainer()
    torch.manual_seed(5)
    control = torch.rand(3)
    torch.manual_seed(5)
    finder = Tuner(trainer).lr_find(model, num_training=50)

    assert isinstance(finder, LRFinder)
    lrs, losses = finder.results["lr"], finder.results["loss"]
    assert len(lrs) == len(losses) == 50
    assert lrs[:2] == pytest.approx([1e-8, 1e-8 * 1e8 ** (2 / 50)]) and lrs[-1] == pytest.approx(1.0)
    assert all(b > a for a, b in itertools.pairwise(lrs))  # exponential growth
    suggestion = finder.suggestion()
    assert suggestion is not None and model.lr == suggestion
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the trial steps were undone
    assert trainer.global_step == 0
    assert torch.equal(torch.rand(3), control)  # no randomness of the user's consumed
    assert not list(tmp_path.glob(".lr_find_*.ckpt"))  # its checkpoint removed
    assert not any(isinstance(c, LearningRateFinder) for c in trainer.callbacks)


def test_the_suggestion_is_the_steepest_descent(make_trainer):
    finder = LRFinder("exponential", 1e-3, 1.0, 5)
    finder.results = {"lr": [1e-3, 1e-2, 1e-1, 0.2, 0.5, 1.0], "loss": [5.0, 4.9, 3.0, 2.9, 2.8, 9.0]}
    assert finder.suggestion(skip_begin=0, skip_end=1) == 1e-2  # the loss falls fastest per unit of rate there
    assert finder.suggestion(skip_begin=4, skip_end=1) is None


def test_then_fit_trains_from_the_same_start_with_the_rate_found(make_trainer):
    tuned = Regression(batch_size=16)
    trainer = make_trainer()
    finder = Tuner(trainer).lr_find(tuned, num_training=40)
    trainer.fit(tuned)
    plain = Regression(batch_size=16, lr=finder.suggestion())
    make_trainer().fit(plain)

    for key, value in plain.state_dict().items():
        torch.testing.assert_close(tuned.state_dict()[key], value)


def test_a_diverging_loss_ends_the_search_early(make_trainer):
    finder = Tuner(make_trainer()).lr_find(Regression(batch_size=16), min_lr=1e-3, max_lr=1e4, num_training=100)
    assert 5 < len(finder.results["loss"]) < 100


def test_a_diverging_loss_is_named_as_the_reason_it_stopped(make_trainer, torchplug_log):
    Tuner(make_trainer()).lr_find(Regression(batch_size=16), min_lr=1e-3, max_lr=1e4, num_training=100)
    assert any("stopped after" in m and "the loss diverged" in m for m in torchplug_log.messages(logging.INFO))


def test_the_range_test_goes_on_over_epochs_beyond_max_epochs(make_trainer, torchplug_log):
    model = Regression(batch_size=512)  # 512 samples: one batch an epoch
    trainer = make_trainer(max_epochs=1)
    finder = Tuner(trainer).lr_find(model, num_training=30)

    assert len(finder.results["loss"]) == 30  # 30 epochs of one batch: the steps asked for, as the data cycles
    assert finder.suggestion() is not None
    assert trainer.max_epochs == 1 and trainer.global_step == 0  # the fit's own limits are back
    assert not any("stopped after" in m for m in torchplug_log.messages(logging.INFO))


class StopsItself(Regression):
    def training_step(self, batch, batch_idx):
        if self.global_step == 12:
            self.trainer.should_stop = True
        return super().training_step(batch, batch_idx)


def test_a_stop_the_model_asked_for_is_named_as_the_reason(make_trainer, torchplug_log):
    finder = Tuner(make_trainer()).lr_find(StopsItself(batch_size=16), num_training=30, update_attr=False)
    assert len(finder.results["loss"]) == 13
    (message,) = [m for m in torchplug_log.messages(logging.INFO) if "learning rate finder stopped" in m]
    assert "stopped after 13 of num_training=30 steps: the model asked the fit to stop" in message


class _OneShot(torch.utils.data.IterableDataset):
    """A stream that can be read once: 3 batches of 16 in the first epoch, none afterwards."""

    def __init__(self) -> None:
        self.left = iter(dataset(48))

    def __iter__(self):
        return self.left


class OneShotStream(Regression):
    def train_dataloader(self):
        return torch.utils.data.DataLoader(_OneShot(), batch_size=16)


def test_running_out_of_data_is_named_as_the_reason_with_how_to_get_more_steps(make_trainer):
    with pytest.warns(UserWarning, match="learning rate finder ran") as warned:
        finder = Tuner(make_trainer()).lr_find(OneShotStream(batch_size=16), num_training=30)
    assert len(finder.results["loss"]) == 3
    (message,) = [str(w.message) for w in warned if "learning rate finder ran" in str(w.message)]
    assert "ran 3 of num_training=30 steps: the training data ran out" in message
    assert "diverged" not in message
    assert not any("max_epochs=-1" in str(w.message) for w in warned)  # the finder's own setting, not the user's
    assert "more training data" in message and "smaller batch size" in message and "num_training=3" in message


def test_linear_mode_and_update_attr_off(make_trainer):
    model = Regression(batch_size=16)
    finder = Tuner(make_trainer()).lr_find(
        model, mode="linear", min_lr=0.01, max_lr=0.1, num_training=11, update_attr=False
    )
    assert finder.results["lr"][:3] == pytest.approx([0.01, 0.01 + 0.09 * 2 / 11, 0.01 + 0.09 * 3 / 11])
    assert model.lr == 0.05


def test_the_plot_is_written_as_png(make_trainer, tmp_path):
    pytest.importorskip("matplotlib")
    finder = Tuner(make_trainer()).lr_find(Regression(batch_size=16), num_training=30)
    path = finder.save_plot(tmp_path / "plots" / "lr.png")
    with open(path, "rb") as stream:
        assert stream.read(8) == b"\x89PNG\r\n\x1a\n"
    figure = finder.plot(suggest=True)
    assert figure.axes[0].get_xscale() == "log"


def test_without_matplotlib_the_plot_names_the_extra(monkeypatch):
    finder = LRFinder("linear", 0.1, 1.0, 2)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'core\[matplotlib\]'"):
        finder.save_plot("never.png")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "validate"}, r"method='validate'\): only 'fit' is supported"),
        ({"dataloaders": [1]}, r"dataloaders=\.\.\.\) is for evaluation methods"),
        ({"min_lr": 1.0, "max_lr": 0.1}, r"give 0 < min_lr < max_lr"),
        ({"mode": "cubic"}, r"choose 'exponential' or 'linear'"),
    ],
    ids=["not-fit", "eval-dataloaders", "bad-range", "bad-mode"],
)
def test_bad_requests_are_refused(make_trainer, kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        Tuner(make_trainer()).lr_find(Regression(), **kwargs)


def test_a_model_without_a_learning_rate_attribute_is_refused_before_training(make_trainer):
    model = Regression()
    del model.lr
    with pytest.raises(AttributeError, match=r"'lr' or 'learning_rate'.*attr_name"):
        Tuner(make_trainer()).lr_find(model)


def test_the_callback_searches_then_fits_with_the_rate(make_trainer):
    model = Regression(batch_size=16)
    start = weights(model)
    rates: list[float] = []
    first: list[dict[str, torch.Tensor]] = []

    def at_train_start(trainer, module):
        rates.append(trainer.optimizers[0].param_groups[0]["lr"])
        first.append(weights(module))

    finder = LearningRateFinder(num_training_steps=30)
    trainer = make_trainer(max_epochs=1, callbacks=[finder, LambdaCallback(on_train_start=at_train_start)])
    trainer.fit(model)

    assert rates == [finder.optimal_lr.suggestion()] == [model.lr]
    assert all(torch.equal(v, start[k]) for k, v in first[0].items())
    assert trainer.global_step == 32  # 512 samples in batches of 16: the search's 30 steps are not counted


def test_the_callbacks_results_travel_in_its_state():
    finder = LearningRateFinder()
    finder.optimal_lr = LRFinder("linear", 0.1, 1.0, 3)
    finder.optimal_lr.results = {"lr": [0.1, 0.5, 1.0], "loss": [3.0, 2.0, 4.0]}
    copy = LearningRateFinder()
    copy.load_state_dict(finder.state_dict())
    assert copy.optimal_lr.results == finder.optimal_lr.results and copy.optimal_lr.mode == "linear"
