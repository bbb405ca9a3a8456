"""A small real classifier and its data, shared by the Trainer's tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def blobs(n: int = 512, classes: int = 4, dim: int = 16, seed: int = 0) -> TensorDataset:
    """Gaussian clusters, one per class, learnable to >95% accuracy in a few epochs.

    The cluster centres are the same for every ``seed``; the seed only draws the samples.
    """
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1000)) * 3
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=generator)
    features = centers[labels] + torch.randn(n, dim, generator=generator)
    return TensorDataset(features, labels)


class BlobData(torchplug.DataModule):
    """Train/val/test/predict splits of :func:`blobs`."""

    def __init__(self, batch_size: int = 32, n: int = 512, shuffle: bool = True) -> None:
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.n = n
        self.shuffle = shuffle

    def setup(self, stage: str) -> None:
        self.train_set = blobs(self.n, seed=0)
        self.val_set = blobs(self.n // 4, seed=1)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=self.shuffle)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=64)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=64)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set.tensors[0], batch_size=64)


class Classifier(torchplug.Module):
    """An MLP classifier with dropout (so resuming must restore the random state)."""

    def __init__(
        self,
        lr: float = 0.05,
        hidden: int = 32,
        dropout: float = 0.1,
        momentum: float = 0.9,
        scheduler: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(hidden, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x).float(), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: Any, prefix: str) -> None:
        x, y = batch
        logits = self(x).float()
        self.log(f"{prefix}_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log(f"{prefix}_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch).argmax(-1)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        if self.hparams.scheduler == "step":
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 5, 0.5), "interval": "step"},
            }
        if self.hparams.scheduler == "epoch":
            return [optimizer], [torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.8)]
        return optimizer


def quiet(**overrides: Any) -> dict[str, Any]:
    """Trainer arguments for a fast, silent CPU run, updated by ``overrides``."""
    base: dict[str, Any] = {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    base.update(overrides)
    return base


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the module's state dict."""
    return {k: v.detach().clone().cpu() for k, v in module.state_dict().items()}
