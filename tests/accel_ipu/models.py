"""A tiny regression model and its data, for training through the Trainer on (fake) IPUs."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def dataset(n: int = 64, seed: int = 0) -> TensorDataset:
    """``y = x @ w + 0.1 * noise`` with 4 features."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=generator))


def loader(n: int = 64, batch_size: int = 4, **kwargs: Any) -> DataLoader[Any]:
    return DataLoader(dataset(n), batch_size=batch_size, **kwargs)


class Regressor(torchplug.Module):
    """One linear layer trained with SGD. The steps return their values (they run inside the compiled
    graph on an IPU); the batch-end hooks log them, as the package README advises."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.lr = lr
        self.seen: list[tuple[torch.dtype, tuple[int, ...]]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        x, y = batch
        self.seen.append((x.dtype, tuple(x.shape)))
        return torch.nn.functional.mse_loss(self(x).float(), y.float())

    def validation_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y.float())

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("train_loss", outputs["loss"])  # outputs is {"loss": ...}, as in Lightning

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", outputs.mean())

    def predict_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def weights(model: torch.nn.Module) -> list[float]:
    return [float(v) for v in torch.cat([p.detach().float().flatten() for p in model.parameters()])]


def reference_weights(batch_size: int, epochs: int, n: int = 64, lr: float = 0.05) -> list[float]:
    """Plain SGD on the CPU: one step per ``batch_size`` samples, in order, on the mean loss."""
    with torch.random.fork_rng(devices=[]):
        model = Regressor(lr)
        optimizer = model.configure_optimizers()
        data = dataset(n)
        for _ in range(epochs):
            for start in range(0, n, batch_size):
                x, y = data.tensors[0][start : start + batch_size], data.tensors[1][start : start + batch_size]
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
        return weights(model)


def quiet(root: Any, **kwargs: Any) -> dict[str, Any]:
    """Trainer arguments for a short, silent run under ``root``, on one IPU unless ``devices=`` says otherwise."""
    return {
        "default_root_dir": str(root),
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "max_epochs": 1,
        "num_sanity_val_steps": 0,
        "devices": 1,
        **kwargs,
    }
