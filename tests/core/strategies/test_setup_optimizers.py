"""``Strategy.setup_optimizers(trainer)``: the optimizers and schedulers made again in the middle of a fit."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from tests.core.trainer.models import quiet


def data() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


class Tunable(torchplug.Module):
    """A regression whose ``configure_optimizers`` reads ``self.lr``, and that records the learning rate used."""

    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.lr = 0.1
        self.automatic_optimization = not manual
        self.lrs_used: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        if self.automatic_optimization:
            self.lrs_used.append(self.trainer.optimizers[0].param_groups[0]["lr"])
            return loss
        optimizer = self.optimizers()
        self.lrs_used.append(optimizer.param_groups[0]["lr"])
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return None

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)]


class NewLearningRate(torchplug.Callback):
    """Lightning's recipe: change what configure_optimizers returns, then have the strategy make them again."""

    def __init__(self, at_epoch: int, lr: float) -> None:
        self.at_epoch, self.lr = at_epoch, lr
        self.replaced: list[Any] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == self.at_epoch:
            self.replaced = list(trainer.optimizers)
            pl_module.lr = self.lr
            trainer.strategy.setup_optimizers(trainer)


@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual"])
def test_setup_optimizers_in_a_callback_trains_on_with_the_new_optimizers(manual: bool) -> None:
    model, callback = Tunable(manual=manual), NewLearningRate(at_epoch=1, lr=0.01)
    trainer = torchplug.Trainer(**quiet(max_epochs=2, callbacks=[callback]))
    trainer.fit(model, data())

    assert model.lrs_used == [0.1] * 4 + [0.01] * 4
    assert trainer.optimizers[0] is not callback.replaced[0]
    assert trainer.strategy.optimizers == trainer.optimizers
    assert trainer.lr_scheduler_configs[0].scheduler.optimizer is trainer.optimizers[0]


def test_setup_optimizers_without_a_fit_is_refused() -> None:
    trainer = torchplug.Trainer(**quiet())
    with pytest.raises(torchplug.MisconfigurationError, match=r"setup_optimizers\(trainer\): .*not set up for fit"):
        trainer.strategy.setup_optimizers(trainer)
