"""What the logger packages' tests share: the data and a quiet Trainer that logs every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


def loader() -> DataLoader[Any]:
    """32 samples in batches of 8: 4 steps an epoch."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def trainer(root: Path, logger: Any, **kwargs: Any) -> torchplug.Trainer:
    """A quiet CPU Trainer under ``root`` that logs every step (2 epochs unless ``max_epochs`` is given)."""
    kwargs.setdefault("max_epochs", 2)
    return torchplug.Trainer(
        accelerator="cpu",
        devices=1,
        logger=logger,
        default_root_dir=str(root),
        enable_progress_bar=False,
        log_every_n_steps=1,
        **kwargs,
    )
