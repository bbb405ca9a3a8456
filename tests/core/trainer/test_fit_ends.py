"""``fit`` always ends: an epoch that takes no optimizer step never makes it loop forever."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet


class _Empty(IterableDataset[Any]):
    def __iter__(self) -> Any:
        return iter(())


class SkipsEveryEpoch(Classifier):
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
        return -1


class NeverSteps(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("train_loss", torch.nn.functional.cross_entropy(self(x), y))


@pytest.mark.parametrize(
    ("model", "data", "max_epochs"),
    [
        (Classifier, DataLoader(_Empty(), batch_size=None), None),
        (SkipsEveryEpoch, BlobData(), None),
        (NeverSteps, BlobData(), None),
        (NeverSteps, BlobData(), -1),
    ],
    ids=["empty-iterable-loader", "on_train_batch_start-returns--1", "manual-never-steps", "max_epochs=-1"],
)
def test_an_epoch_without_an_optimizer_step_ends_fit_with_a_warning(model: type, data: Any, max_epochs: Any) -> None:
    trainer = torchplug.Trainer(**quiet(max_steps=100, max_epochs=max_epochs))
    with pytest.warns(UserWarning, match=r"fit\(\) stopped after epoch 0: the epoch took no optimizer step"):
        trainer.fit(model(), data)
    assert trainer.global_step == 0
    assert trainer.current_epoch == 1


def test_with_max_epochs_the_epochs_still_run_to_their_limit() -> None:
    trainer = torchplug.Trainer(**quiet(max_steps=100, max_epochs=3))
    trainer.fit(NeverSteps(), datamodule=BlobData())
    assert trainer.current_epoch == 3


def test_no_training_batches_at_all_returns_at_once(caplog: pytest.LogCaptureFixture) -> None:
    trainer = torchplug.Trainer(**quiet(max_steps=100, limit_train_batches=0))
    with caplog.at_level(logging.INFO, logger="torchplug"):
        trainer.fit(Classifier(), datamodule=BlobData())
    assert "fit() stopped: no training batches (limit_train_batches=0 or an empty loader)." in caplog.text
    assert trainer.global_step == 0


def test_max_epochs_0_sets_up_and_trains_nothing_as_in_lightning(torchplug_log: Any) -> None:
    """Lightning's ``fit`` with ``max_epochs=0`` runs no epoch: no training hook, no step, an info line."""

    class Recording(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def on_fit_start(self) -> None:
            self.calls.append("on_fit_start")

        def on_train_start(self) -> None:
            self.calls.append("on_train_start")

        def on_fit_end(self) -> None:
            self.calls.append("on_fit_end")

    model = Recording()
    trainer = torchplug.Trainer(**quiet(max_epochs=0))
    trainer.fit(model, datamodule=BlobData())

    assert (trainer.global_step, trainer.current_epoch) == (0, 0)
    assert model.calls == ["on_fit_start", "on_fit_end"]
    assert "fit() stopped: max_epochs=0, so no epoch runs." in torchplug_log.messages(logging.INFO)
    assert trainer.state.finished


def test_an_empty_training_loader_is_announced() -> None:
    """limit_train_batches=0 asks for no training (an info); a loader with no batches is a warning."""
    empty = DataLoader(torch.utils.data.TensorDataset(torch.zeros(0, 16), torch.zeros(0).long()), batch_size=4)
    trainer = torchplug.Trainer(**quiet(max_steps=100))
    with pytest.warns(UserWarning, match=r"fit\(\) stopped: the training dataloader has no batches"):
        trainer.fit(Classifier(), empty)
    assert trainer.global_step == 0


def test_a_second_fit_goes_on_only_when_fit_loop_limits_are_raised() -> None:
    model, data = Classifier(), BlobData()
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    trainer.fit(model, data)
    first = trainer.global_step
    with pytest.warns(
        UserWarning, match=r"this Trainer's earlier fit\(\) ended at epoch 1.*trainer\.fit_loop\.max_epochs"
    ):
        trainer.fit(model, data)  # max_epochs=1 is reached: nothing to train, and said so
    assert trainer.global_step == first
    trainer.fit_loop.max_epochs = 3  # Lightning's way to train on with the same Trainer
    trainer.fit(model, data)
    assert (trainer.max_epochs, trainer.current_epoch, trainer.global_step) == (3, 3, 3 * first)
    trainer.fit_loop.max_steps = 4 * first
    assert trainer.max_steps == trainer.fit_loop.max_steps == 4 * first


@pytest.mark.parametrize(
    ("name", "value"), [("max_epochs", -2), ("max_steps", -2), ("min_epochs", "1"), ("min_steps", 1.5)]
)
def test_a_bad_fit_loop_limit_is_refused_naming_it(name: str, value: Any) -> None:
    trainer = torchplug.Trainer(**quiet())
    with pytest.raises(torchplug.MisconfigurationError, match=rf"fit_loop\.{name}={value!r} is not valid"):
        setattr(trainer.fit_loop, name, value)
