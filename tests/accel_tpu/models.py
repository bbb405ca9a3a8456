"""A tiny regression model and its data, for training through the Trainer on (fake) XLA devices."""

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


def loader(n: int = 64, batch_size: int = 8) -> DataLoader[Any]:
    return DataLoader(dataset(n), batch_size=batch_size)


class Regressor(torchplug.Module):
    """One linear layer, trained with SGD; records the dtype and device of each training batch."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.lr = lr
        self.seen: list[tuple[torch.dtype, str]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen.append((self(x).dtype, x.device.type))
        loss = torch.nn.functional.mse_loss(self(x).float(), y.float())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x).float(), y.float()))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def quiet(root: Any, **kwargs: Any) -> dict[str, Any]:
    """Trainer arguments for a short, silent run under ``root``."""
    return {
        "default_root_dir": str(root),
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "max_epochs": 1,
        "num_sanity_val_steps": 0,
        **kwargs,
    }


class IndexedRegressor(Regressor):
    """The Regressor on ``(x, y, index)`` batches: each process records the samples it trained on and
    exercises the strategy's collectives once training is over, writing ``rank-<r>.json`` to ``out``."""

    def __init__(self, out: str, fail_rank: int | None = None, lr: float = 0.05) -> None:
        super().__init__(lr)
        self.out = out
        self.fail_rank = fail_rank
        self.indices: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, index = batch
        if self.trainer.global_rank == self.fail_rank and batch_idx == 1:
            raise ValueError(f"rank {self.fail_rank} fails on purpose")
        self.indices += [int(i) for i in index.cpu()]
        return super().training_step((x, y), batch_idx)

    def on_fit_end(self) -> None:
        import json

        strategy = self.trainer.strategy
        rank = strategy.global_rank
        record = {
            "rank": rank,
            "world_size": strategy.world_size,
            "local_rank": strategy.local_rank,
            "indices": self.indices,
            "weights": [float(v) for v in torch.cat([p.detach().cpu().flatten() for p in self.parameters()])],
            # payloads of different sizes on every rank: only rank 1's must arrive
            "broadcast": strategy.broadcast({"from": rank, "pad": "x" * (10 + 100 * rank)}, src=1),
            "tensor_broadcast": strategy.broadcast(torch.tensor([float(rank + 5)]), src=1).tolist(),
            "all_gather": strategy.all_gather(torch.tensor([rank, 10 * rank])).tolist(),
            "sum": float(strategy.reduce(torch.tensor(rank + 1.0), reduce_op="sum")),
            "mean": float(strategy.reduce(torch.tensor(rank + 1), reduce_op="mean")),
            "max": float(strategy.reduce(torch.tensor(rank + 1.0), reduce_op="max")),
            "any": strategy.reduce_boolean_decision(rank == 1, all=False),
            "all": strategy.reduce_boolean_decision(rank == 1, all=True),
            "sampler": type(self.trainer.train_dataloader.sampler).__name__,
            "loader": type(self.trainer.train_dataloader).__name__,
        }
        strategy.barrier("before-write")
        with open(f"{self.out}/rank-{rank}.json", "w") as file:
            json.dump(record, file)


def indexed_loader(n: int = 64, batch_size: int = 8) -> DataLoader[Any]:
    data = dataset(n)
    return DataLoader(TensorDataset(*data.tensors, torch.arange(n)), batch_size=batch_size)
