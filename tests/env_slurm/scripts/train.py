"""A small deterministic training run for the SLURM tests: ``srun -n2 python train.py --out DIR``.

Trains an MLP on synthetic data with ``Trainer(accelerator="cpu", devices="auto", strategy=...)``,
so the cluster environment, the device count and the strategy all come from what SLURM started.
Each rank writes ``DIR/weights.rank<N>.pt`` and ``DIR/report.rank<N>.json`` at the end. While it
trains, rank 0 writes ``DIR/started.<restart count>.json`` after the first step, so a test knows
when to send a signal; ``--sleep`` slows the steps down (in a callback, not in the core) so the
signal lands mid-training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug


class MLP(torchplug.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 8, generator=generator)
    y = (x[:, :1] * 0.7 - x[:, 1:2] * 0.3).sin() + 0.05 * torch.randn(256, 1, generator=generator)
    return TensorDataset(x, y)


class Pace(torchplug.Callback):
    """Reports the start of training (rank 0, after the first step) and slows each step down."""

    def __init__(self, out: Path, sleep: float) -> None:
        self.out, self.sleep = out, sleep
        self.first_step: int | None = None

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.first_step is None:
            self.first_step = trainer.global_step - 1
            if trainer.is_global_zero:
                restart = os.environ.get("SLURM_RESTART_COUNT", "0")
                _write_json(
                    self.out / f"started.{restart}.json", {"resumed_at_step": self.first_step, "pid": os.getpid()}
                )
        time.sleep(self.sleep)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _csv(root: Path) -> Any:
    from torchplug.loggers.csv_logs import CSVLogger

    return CSVLogger(str(root), version="run")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument(
        "--sharded", action="store_true", help="FSDP with sharded checkpoints (DCP), saved every 4 steps under root/"
    )
    parser.add_argument("--csv", action="store_true", help="log every step to a CSVLogger under DIR/root")
    parser.add_argument("--checkpoint", action="store_true", help="a ModelCheckpoint in DIR/root/ckpts")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = MLP()
    pace = Pace(args.out, args.sleep)
    strategy: Any = args.strategy
    callbacks: list[Any] = [pace]
    if args.sharded:
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint
        from torchplug.strategies.fsdp import FSDPStrategy

        strategy = FSDPStrategy(state_dict_type="sharded")
        callbacks.append(ModelCheckpoint(every_n_train_steps=4, save_top_k=2, save_last=True))
    elif args.checkpoint:
        from torchplug.callbacks import ModelCheckpoint

        callbacks.append(ModelCheckpoint(dirpath=args.out / "root" / "ckpts", every_n_train_steps=10_000))
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices="auto",
        strategy=strategy,
        max_epochs=args.max_epochs,
        enable_progress_bar=False,
        logger=_csv(args.out / "root") if args.csv else False,
        log_every_n_steps=1,
        enable_checkpointing=args.sharded or args.checkpoint,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=args.out / "root",
    )
    trainer.fit(model, DataLoader(dataset(), batch_size=16, shuffle=True))
    rank = trainer.global_rank
    report = {
        "rank": rank,
        "world_size": trainer.world_size,
        "global_step": trainer.global_step,
        "preempted": trainer.preempted,
        "environment": type(trainer.cluster_environment).__name__,
        "strategy": type(trainer.strategy).__name__,
        "num_devices": trainer.num_devices,
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
        "resumed_at_step": pace.first_step,
        "describe": trainer.describe(),
    }
    if trainer.preempted:  # the checkpoint is written and the job requeued: SLURM ends this run now
        _write_json(args.out / f"preempted.rank{rank}.json", report)
        return 0
    # Sharded parameters (FSDP) are gathered whole, on every rank, to compare them.
    weights = {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in model.state_dict().items()
    }
    torch.save(weights, args.out / f"weights.rank{rank}.pt")
    _write_json(args.out / f"report.rank{rank}.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
