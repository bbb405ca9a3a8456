"""Train a deterministic model, checkpointing after every step, resuming from ``last.ckpt`` when there is one.

``python fault_train.py ROOT IO MAX_STEPS``: IO is ``torch`` or ``async``. Checkpoints go to
``ROOT/ckpts`` (the two most recent, and ``last.ckpt``); every 8 MB save is long enough to be killed
in the middle. A run that reaches MAX_STEPS writes ``ROOT/final.pt`` and prints ``DONE <global step>``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug.callbacks import ModelCheckpoint


class Model(torchplug.Module):
    """An MLP of 2M parameters (8 MB of weights, 24 MB with its Adam state), with dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(), torch.nn.Linear(1024, 1),
        )  # fmt: skip

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def data() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(256, 64, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True).tanh()), batch_size=16, shuffle=True)


def main(root: str, io: str, max_steps: int) -> None:
    torch.set_num_threads(1)
    ckpts = os.path.join(root, "ckpts")
    last = os.path.join(ckpts, "last.ckpt")
    trainer = torchplug.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        plugins=["async"] if io == "async" else None,
        callbacks=[ModelCheckpoint(dirpath=ckpts, every_n_train_steps=1, save_top_k=2, save_last=True)],
        logger=False,
        enable_progress_bar=False,
        default_root_dir=root,
    )
    torch.manual_seed(0)
    model = Model()
    trainer.fit(model, data(), ckpt_path=last if os.path.exists(last) else None)
    torch.save(model.state_dict(), os.path.join(root, "final.pt"))
    print("DONE", trainer.global_step, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
