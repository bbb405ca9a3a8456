"""A time ``val_check_interval``: validate once that much wall time has passed since the last validation.

As in Lightning 2.6: ``"DD:HH:MM:SS"``, a dict of ``timedelta`` arguments or a ``timedelta``; the clock
starts when training starts and again when each validation ends; ``check_val_every_n_epoch`` still
gates the epochs; there is no extra validation at the end of an epoch.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import torchplug
import torchplug.loops.fit
from tests.core.trainer.models import Classifier, blobs, quiet


class Clock:
    """The fit loop's clock, advanced by the model: the tests do not depend on how fast the machine is."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(torchplug.loops.fit, "time", fake)
    return fake


class SlowClassifier(Classifier):
    """Each training batch takes ``seconds`` on ``clock``; records after which global steps validation ran."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds
        self.validated_at: list[int] = []

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.clock.now += self.seconds

    def on_validation_start(self) -> None:
        self.validated_at.append(self.global_step)
        self.clock.now += 60.0  # a validation's own time does not count


def loaders(train: int = 128) -> tuple[DataLoader[Any], DataLoader[Any]]:
    return DataLoader(blobs(train), batch_size=16), DataLoader(blobs(16, seed=1), batch_size=16)


@pytest.mark.parametrize(
    "interval",
    [{"seconds": 0.25}, timedelta(milliseconds=250)],
    ids=["dict", "timedelta"],
)
def test_validation_runs_each_time_the_interval_has_passed(clock: Clock, interval: Any) -> None:
    model = SlowClassifier(clock, seconds=0.1)  # 8 batches of 0.1 s: the interval passes after every 3rd
    trainer = torchplug.Trainer(**quiet(max_epochs=1, val_check_interval=interval))
    trainer.fit(model, *loaders())

    assert model.validated_at == [3, 6]  # the clock restarts after each validation; none added at the epoch end
    assert trainer.val_check_interval == timedelta(milliseconds=250)


def test_a_zero_interval_validates_after_every_batch(clock: Clock) -> None:
    model = SlowClassifier(clock, seconds=0.0)
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=3, val_check_interval="00:00:00:00"))
    trainer.fit(model, *loaders())

    assert model.validated_at == [1, 2, 3]


def test_check_val_every_n_epoch_still_chooses_the_epochs(clock: Clock) -> None:
    model = SlowClassifier(clock, seconds=0.0)
    trainer = torchplug.Trainer(
        **quiet(max_epochs=2, limit_train_batches=2, val_check_interval={"seconds": 0}, check_val_every_n_epoch=2)
    )
    trainer.fit(model, *loaders())

    assert model.validated_at == [3, 4]  # only in the second epoch


def test_a_long_interval_never_validates_a_short_run(clock: Clock) -> None:
    model = SlowClassifier(clock, seconds=0.0)
    trainer = torchplug.Trainer(**quiet(max_epochs=2, val_check_interval="01:00:00:00"))
    trainer.fit(model, *loaders())

    assert model.validated_at == []


class Endless(IterableDataset[Any]):
    """A training stream without a length (a time interval needs none)."""

    def __iter__(self) -> Any:
        data = blobs(32)
        return iter(zip(data.tensors[0].split(16), data.tensors[1].split(16), strict=True))


def test_a_time_interval_works_with_a_loader_without_length(clock: Clock) -> None:
    model = SlowClassifier(clock, seconds=0.0)
    trainer = torchplug.Trainer(**quiet(max_epochs=1, val_check_interval={"seconds": 0}))
    trainer.fit(model, DataLoader(Endless(), batch_size=None), loaders()[1])

    assert model.validated_at == [1, 2]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2 seconds", r"val_check_interval='2 seconds' is not a duration"),
        ({"secs": 2}, r"val_check_interval=\{'secs': 2\}: the dict's keys must be timedelta arguments"),
        (timedelta(seconds=-1), r"val_check_interval=.* is negative"),
        (torch.tensor(1.0), r"val_check_interval=tensor\(1\.\) is not valid: .*datetime\.timedelta"),
    ],
    ids=["text", "bad-dict", "negative", "tensor"],
)
def test_a_bad_interval_is_refused_naming_it(value: Any, message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=message):
        torchplug.Trainer(**quiet(val_check_interval=value))
