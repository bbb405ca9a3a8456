"""A tiny model that logs on step and on epoch, and CPU Trainers writing under ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug.core.module import Module
from torchplug.trainer.trainer import Trainer


class LoggingModel(Module):
    """A linear regression with saved hyperparameters; logs ``train_loss`` on step and epoch, and ``val_loss``."""

    def __init__(self, lr: float = 0.05, hidden: int = 4, name: str = "tiny") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(hidden, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@pytest.fixture
def fit_with() -> Callable[..., tuple[Trainer, LoggingModel]]:
    """Fit a :class:`LoggingModel` for 2 epochs of 8 batches with ``logger``; returns the Trainer and the model."""

    def run(logger: Any, **kwargs: Any) -> tuple[Trainer, LoggingModel]:
        torch.manual_seed(0)
        x = torch.randn(32, 4)
        loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
        kwargs.setdefault("max_epochs", 2)
        trainer = Trainer(
            accelerator="cpu",
            devices=1,
            logger=logger,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
            log_every_n_steps=2,
            **kwargs,
        )
        model = LoggingModel(lr=0.01, name="regression")
        trainer.fit(model, loader, loader)
        return trainer, model

    return run
