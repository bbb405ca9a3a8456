"""Models for the tuner's tests: one that reads its batch size, one that runs out of memory above a size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug import Module
from torchplug.trainer.trainer import Trainer


def dataset(n: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Regression(Module):
    """y = sum(x); the tuner writes ``lr`` and ``batch_size``; a batch above ``memory`` samples runs out of it."""

    def __init__(self, lr: float = 0.05, batch_size: int = 2, memory: int = 10**9, samples: int = 512) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.lr = lr
        self.batch_size = batch_size
        self.memory = memory
        self.samples = samples
        self.batch_sizes_seen: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.batch_sizes_seen.append(len(x))
        if len(x) > self.memory:
            raise torch.OutOfMemoryError(f"out of memory: {len(x)} samples need more than the device has")
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(dataset(self.samples), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(dataset(64, seed=1), batch_size=self.batch_size)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


@pytest.fixture
def make_trainer(tmp_path: Any) -> Callable[..., Trainer]:
    def build(**kwargs: Any) -> Trainer:
        kwargs.setdefault("accelerator", "cpu")
        kwargs.setdefault("devices", 1)
        kwargs.setdefault("default_root_dir", str(tmp_path))
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_checkpointing", False)
        kwargs.setdefault("max_epochs", 3)
        return Trainer(**kwargs)

    return build


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
