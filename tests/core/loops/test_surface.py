"""Lightning's loop surface: ``fit_loop.epoch_loop``, progress counters, ``restarting``, one door per limit."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug._errors import MisconfigurationError


class _Model(torchplug.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[tuple[int, int, int, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        epoch_loop = self.trainer.fit_loop.epoch_loop
        progress = epoch_loop.batch_progress
        self.seen.append((batch_idx, progress.current.ready, epoch_loop.total_batch_idx, progress.is_last_batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(**kwargs: Any) -> torchplug.Trainer:
    return torchplug.Trainer(
        logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False, **kwargs
    )


def _loader() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)


def test_the_counters_follow_the_loop_as_lightnings_do():
    model, trainer = _Model(), _trainer(max_epochs=2)
    trainer.fit(model, _loader())
    fit_loop = trainer.fit_loop
    assert fit_loop.epoch_progress.current.completed == 2
    assert fit_loop.epoch_progress.total.completed == 2
    assert fit_loop.epoch_loop.batch_progress.total.completed == 8
    assert fit_loop.total_batch_idx == fit_loop.epoch_loop.total_batch_idx == 7
    assert fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer_steps == 8
    assert fit_loop.epoch_loop.global_step == trainer.global_step == 8
    assert fit_loop.epoch_loop._batches_that_stepped == 8
    assert fit_loop.epoch_loop.val_loop is fit_loop.val_loop
    assert fit_loop.done is True  # a property, as in Lightning (a bound method would always be true)
    assert fit_loop.restarting is False
    # During the epoch: the batch just run is counted, and the last one is marked.
    assert model.seen[:4] == [(0, 1, 0, False), (1, 2, 1, False), (2, 3, 2, False), (3, 4, 3, True)]
    assert model.seen[4] == (0, 1, 4, False)


def test_progress_is_read_only_and_says_how_to_move_it():
    trainer = _trainer(max_epochs=1)
    trainer.fit(_Model(), _loader())
    with pytest.raises(AttributeError, match=r"read-only here \(ready = 5\).*fit\(ckpt_path=\.\.\.\)"):
        trainer.fit_loop.epoch_loop.batch_progress.current.ready = 5


def test_restarting_is_true_from_a_checkpoint_until_the_loop_runs_again(tmp_path):
    trainer = _trainer(max_epochs=1)
    trainer.fit(_Model(), _loader())
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    states: list[bool] = []

    class Watch(torchplug.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            states.append(trainer.fit_loop.restarting)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            states.append(trainer.fit_loop.restarting)

    _trainer(max_epochs=2, callbacks=[Watch()]).fit(_Model(), _loader(), ckpt_path=tmp_path / "one.ckpt")
    assert states == [True, False]


def test_each_limit_has_one_door_checked_as_the_argument():
    trainer = _trainer(max_epochs=1)
    trainer.fit_loop.max_epochs = 3
    assert trainer.max_epochs == 3
    trainer.max_steps = 7
    assert trainer.fit_loop.max_steps == trainer.fit_loop.epoch_loop.max_steps == 7
    with pytest.raises(MisconfigurationError, match=r"fit_loop\.max_epochs=-2 is not valid"):
        trainer.fit_loop.max_epochs = -2
    with pytest.raises(MisconfigurationError, match=r"trainer\.limit_val_batches"):
        trainer.limit_val_batches = -2
    with pytest.raises(AttributeError, match=r"trainer\.inference_mode cannot be changed.*Trainer\(\.\.\.\)"):
        trainer.inference_mode = False
    assert trainer.max_epochs == 3 and trainer.limit_val_batches is None
