"""A tiny model and data for the command-line tests: class paths such as ``tests.core.cli.tiny.TinyModel``."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def _dataset(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class TinyData(torchplug.DataModule):
    """Two separable classes in 4 dimensions."""

    def __init__(self, n: int = 64, batch_size: int = 16) -> None:
        self.save_hyperparameters()
        self.n = n
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = _dataset(self.n, 0), _dataset(self.n // 2, 1)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=32)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=32)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=32)


class TinyModel(torchplug.Module):
    """A linear classifier; ``hidden`` only exists to be overridden from configs."""

    def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(x)
        return logits

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        self.log(f"{stage}_acc", (self(x).argmax(-1) == y).float().mean())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits: torch.Tensor = self(batch[0])
        return logits.argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class BuggyModel(TinyModel):
    """A model with a real bug in its training step."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise RuntimeError("bug in training_step")
