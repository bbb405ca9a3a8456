"""Two real processes (strategy="ddp", gloo on the CPU) read a dataset that draws random numbers in its workers.

Run by test_worker_seeds.py as ``python ddp_worker_seeds.py OUT``; the ``ddp`` launcher re-runs this
command line for rank 1. Three fits, each after ``seed_everything(7, workers=...)``: workers seeded,
the same again, and torch's own worker seeding. Each rank writes ``rank<R>.json``: for each fit, the
random numbers (torch, Python, NumPy) its training batches held, in order.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import torchplug


class Augmented(Dataset[torch.Tensor]):
    """Eight samples, each three random draws made in the worker that loads it (as an augmentation does)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([torch.rand(()).item(), random.random(), float(np.random.rand())], dtype=torch.float64)


class Records(torchplug.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen: list[list[float]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.seen.extend(batch.tolist())
        return self.layer(batch.float()).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path) -> None:
    runs = {}
    for name, workers in (("seeded", True), ("seeded-again", True), ("torch-only", False)):
        torchplug.seed_everything(7, workers=workers)
        model = Records()
        trainer = torchplug.Trainer(
            accelerator="cpu",
            devices=2,
            strategy="ddp",
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, DataLoader(Augmented(), batch_size=2, num_workers=1))
        runs[name] = model.seen
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(runs))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
