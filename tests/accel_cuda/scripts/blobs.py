"""A small classifier and its data, learnable in a few epochs: shared by the GPU tests and the DDP script."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def blobs(n: int = 512, seed: int = 0) -> TensorDataset:
    """Four Gaussian clusters in 16 dimensions, one per class; the seed only draws the samples."""
    centers = torch.randn(4, 16, generator=torch.Generator().manual_seed(1000)) * 3
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=generator)
    return TensorDataset(centers[labels] + torch.randn(n, 16, generator=generator), labels)


def loaders(batch_size: int = 32) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Training and validation loaders (the Trainer adds a DistributedSampler under DDP)."""
    return (
        DataLoader(blobs(512, seed=0), batch_size=batch_size, shuffle=True),
        DataLoader(blobs(128, seed=1), batch_size=64),
    )


class Classifier(torchplug.Module):
    """An MLP classifier; logs ``val_acc``."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x).float(), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).float().argmax(-1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def quiet(**overrides: Any) -> dict[str, Any]:
    """Trainer arguments for a fast, silent run on the GPU, updated by ``overrides``."""
    return {
        "accelerator": "cuda",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "num_sanity_val_steps": 0,
        **overrides,
    }
