"""Tuner.scale_batch_size and the BatchSizeFinder callback: the largest batch size that fits in memory."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from tests.core.tuner.conftest import Regression, dataset, weights
from torchplug import DataModule
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import BatchSizeFinder
from torchplug.tuner import Tuner


@pytest.mark.parametrize(
    ("mode", "kwargs", "found"),
    [
        ("power", {}, 32),  # 2, 4, ..., 32 fit; 64 does not
        ("binsearch", {}, 35),  # 32 fits, 64 not: bisect to 37, then 5% off
        ("binsearch", {"margin": 0.0}, 37),
        ("power", {"max_trials": 3}, 8),  # 2, 4, 8
        ("power", {"max_val": 24}, 24),  # 2 ... 16, then 24 (32 capped at max_val), which fits: no further
        ("binsearch", {"init_val": 100, "margin": 0.0}, 37),  # starts too big: bisects down
    ],
    ids=["power", "binsearch", "binsearch-no-margin", "max-trials", "max-val", "start-too-big"],
)
def test_finds_the_largest_size_that_fits(make_trainer, mode, kwargs, found):
    model = Regression(memory=37)
    before = weights(model)
    trainer = make_trainer()
    size = Tuner(trainer).scale_batch_size(model, mode=mode, **kwargs)

    assert size == found == model.batch_size
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the trials were undone
    assert trainer.global_step == 0


@pytest.mark.parametrize(
    ("mode", "init_val"),
    [("power", 2), ("binsearch", 2), ("binsearch", 300)],
    ids=["power", "binsearch", "start-above"],
)
def test_the_size_found_never_exceeds_the_training_samples(make_trainer, mode, init_val):
    model = Regression(samples=100)  # memory never runs out: only the data limits the size
    size = Tuner(make_trainer()).scale_batch_size(model, mode=mode, init_val=init_val)

    assert size == 100 == model.batch_size  # one batch covers the data; no margin, since memory never ran out
    assert max(model.batch_sizes_seen) == 100  # no trial asked for more samples than there are


@pytest.mark.parametrize(("mode", "found"), [("power", 64), ("binsearch", 99)])
def test_running_out_of_memory_at_the_training_sets_length_bisects_below_it(make_trainer, mode, found):
    model = Regression(samples=100, memory=99)  # the whole set in one batch is one sample too many
    size = Tuner(make_trainer()).scale_batch_size(model, mode=mode, margin=0.0)
    assert size == found == model.batch_size


def test_then_fit_uses_the_size(make_trainer):
    model = Regression(memory=37)
    trainer = make_trainer(max_epochs=1)
    Tuner(trainer).scale_batch_size(model)
    model.batch_sizes_seen.clear()
    trainer.fit(model)
    assert set(model.batch_sizes_seen) == {32}  # 512 samples: 16 batches of 32


def test_the_size_may_live_on_the_datamodule(make_trainer):
    class Data(DataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 4

        def train_dataloader(self) -> DataLoader:
            return DataLoader(dataset(256), batch_size=self.batch_size)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(dataset(32), batch_size=self.batch_size)

    model = Regression(memory=20)
    del model.batch_size
    data = Data()
    assert Tuner(make_trainer()).scale_batch_size(model, datamodule=data) == 16
    assert data.batch_size == 16


def test_the_callback_searches_then_fits(make_trainer):
    model = Regression(memory=37)
    finder = BatchSizeFinder(mode="power", steps_per_trial=2)
    trainer = make_trainer(max_epochs=1, callbacks=[finder])
    trainer.fit(model)
    assert finder.optimal_batch_size == 32
    assert model.batch_sizes_seen[-16:] == [32] * 16 and trainer.global_step == 16


def test_out_of_memory_at_size_one_is_an_error(make_trainer):
    with pytest.raises(MisconfigurationError, match="ran out of memory with a batch size of 1"):
        Tuner(make_trainer()).scale_batch_size(Regression(memory=0), init_val=1)


def test_other_errors_are_not_taken_for_memory(make_trainer):
    model = Regression()
    model.training_step = lambda batch, batch_idx: 1 / 0
    with pytest.raises(ZeroDivisionError):
        Tuner(make_trainer()).scale_batch_size(model)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda t, m: t.scale_batch_size(m, train_dataloaders=m.train_dataloader()),
            "cannot use dataloaders passed to it",
        ),
        (lambda t, m: t.scale_batch_size(m, batch_arg_name="bs"), r"sets 'bs', but neither Regression"),
        (lambda t, m: t.scale_batch_size(m, mode="linear"), r"mode='linear'\): choose 'power' or 'binsearch'"),
        (lambda t, m: t.scale_batch_size(m, method="test"), r"only 'fit' is supported"),
    ],
    ids=["direct-dataloaders", "no-attribute", "bad-mode", "not-fit"],
)
def test_bad_requests_are_refused(make_trainer, call, message):
    with pytest.raises(MisconfigurationError, match=message):
        call(Tuner(make_trainer()), Regression())


@pytest.mark.slow
def test_several_processes_are_refused(make_trainer):
    trainer = make_trainer(strategy="ddp_spawn", devices=2)
    with pytest.raises(Exception, match="runs in one process; this Trainer runs 2"):  # raised in the workers
        Tuner(trainer).scale_batch_size(Regression())
