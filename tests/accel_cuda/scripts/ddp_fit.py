"""Train the blob classifier with DDP on the GPUs; every rank writes what it saw to ``--out/rank<N>.json``.

Run by tests/accel_cuda/test_gpu.py as ``python ddp_fit.py --out DIR [--strategy ddp_fork] ...``.
``strategy="ddp"`` re-runs this same command line for the other local ranks; ``"ddp_fork"`` forks
workers from the process that built the Trainer. Each rank records from inside its own process,
at the end of fit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blobs import Classifier, loaders, quiet

import torchplug


class Record(torchplug.Callback):
    """Writes this rank's device, backend, step and final weights to ``rank<global rank>.json``."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_fit_end(self, trainer: torchplug.Trainer, module: torchplug.Module) -> None:
        weights = torch.cat([p.detach().float().cpu().flatten() for p in module.parameters()])
        record = {
            "global_rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "pid": os.getpid(),
            "device": str(trainer.strategy.root_device),
            "current_device": torch.cuda.current_device(),
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "global_step": trainer.global_step,
            "val_acc": float(trainer.callback_metrics["val_acc"]),
            "weights": weights.tolist(),
        }
        with open(os.path.join(self.out, f"rank{trainer.global_rank}.json"), "w") as file:
            json.dump(record, file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--precision", default="32-true")
    args = parser.parse_args()
    torchplug.seed_everything(7)
    trainer = torchplug.Trainer(
        **quiet(
            devices=args.devices,
            strategy=args.strategy,
            precision=args.precision,
            max_epochs=3,
            callbacks=[Record(args.out)],
        )
    )
    if not torch.cuda.is_initialized():  # the parent of ddp_fork must reach the fork with CUDA untouched
        with open(os.path.join(args.out, f"parent{os.getpid()}.json"), "w") as file:
            json.dump({"cuda_initialized_before_fit": False}, file)
    trainer.fit(Classifier(), *loaders())


if __name__ == "__main__":
    main()
