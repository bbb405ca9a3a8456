"""Two real processes (strategy="ddp", gloo on the CPU) log torchmetrics Metrics and plain values.

Run by test_logging_ddp.py as ``python ddp_logging.py OUT``; the ``ddp`` launcher re-runs this
command line for rank 1. Each rank writes ``rank<R>.json``: its callback metrics after fit and the
validation predictions and labels it saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Logs(torchplug.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.val_acc = torchmetrics.Accuracy(task="binary")
        self.seen: list[tuple[list[int], list[int]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        predictions = self.layer(batch[0]).argmax(-1)
        self.seen.append((predictions.tolist(), batch[1].tolist()))
        self.val_acc.update(predictions, batch[1])
        self.log("val_acc", self.val_acc)
        rank = float(self.global_rank)
        self.log("synced", rank, sync_dist=True)
        self.log("local", rank)
        self.log("zero_only", rank, sync_dist=True, rank_zero_only=True)

    def on_validation_start(self) -> None:
        self.seen.clear()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = Logs()
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(data(32, 0), batch_size=8), DataLoader(data(40, 1), batch_size=4))
    record = {
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "seen": model.seen,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
