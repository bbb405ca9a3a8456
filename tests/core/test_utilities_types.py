"""``torchplug.utilities.types``: the hook types Lightning code annotates with, and the scheduler config."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug.core.module import Module
from torchplug.trainer.optimizers import LRSchedulerConfig as ReadByTheTrainer
from torchplug.trainer.trainer import Trainer
from torchplug.utilities.types import STEP_OUTPUT, LRSchedulerConfig, OptimizerLRScheduler


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def test_the_config_the_trainer_reads_is_the_public_one():
    assert ReadByTheTrainer is LRSchedulerConfig


def test_the_fields_are_lightnings_in_its_order():
    names = [field.name for field in dataclasses.fields(LRSchedulerConfig)]
    assert names == ["scheduler", "name", "interval", "frequency", "reduce_on_plateau", "monitor", "strict"]
    step = torch.optim.lr_scheduler.StepLR(_optimizer(), 1)
    positional = LRSchedulerConfig(step, "warmup", "step", 2, False, None, False)
    assert (positional.name, positional.interval, positional.frequency) == ("warmup", "step", 2)
    assert (positional.reduce_on_plateau, positional.monitor, positional.strict) == (False, None, False)


@pytest.mark.parametrize(
    ("make", "given", "expected"),
    [
        (lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o), None, True),
        (lambda o: torch.optim.lr_scheduler.StepLR(o, 1), None, False),
        (lambda o: torch.optim.lr_scheduler.StepLR(o, 1), True, True),
        (lambda o: torch.optim.lr_scheduler.StepLR(o, 1), 1, True),
    ],
    ids=["ReduceLROnPlateau", "StepLR", "set for another scheduler", "truthy value"],
)
def test_reduce_on_plateau_defaults_to_the_kind_of_scheduler(make: Any, given: Any, expected: bool):
    config = LRSchedulerConfig(make(_optimizer()), reduce_on_plateau=given)
    assert config.reduce_on_plateau is expected


class PlateauLike:
    """A scheduler of one's own that steps on a metric, as ReduceLROnPlateau does."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def step(self, metric: float) -> None:
        self.seen.append(float(metric))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class StepsOnAMetric(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.scheduler = PlateauLike()

    def training_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def configure_optimizers(self) -> OptimizerLRScheduler:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        config = {"scheduler": self.scheduler, "reduce_on_plateau": True, "monitor": "train_loss"}
        return {"optimizer": optimizer, "lr_scheduler": config}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step(metric)


def test_reduce_on_plateau_in_the_scheduler_dict_hands_the_monitored_metric_to_any_scheduler():
    model = StepsOnAMetric()
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(model, data)
    assert trainer.lr_scheduler_configs[0].reduce_on_plateau is True
    assert len(model.scheduler.seen) == 2  # once per epoch, with the epoch's train_loss
    assert model.scheduler.seen[-1] == pytest.approx(float(trainer.callback_metrics["train_loss"]))
