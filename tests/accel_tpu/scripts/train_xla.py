"""Train the IndexedRegressor with strategy='xla' on the fake torch_xla's devices, as a user script would.

Usage: train_xla.py OUT [--start-method fork] [--fail-rank R] [--epochs N]. Rank 0's final state
and the caller's view after fit() go to OUT/parent.json; each process writes OUT/rank-<r>.json.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import torchplug
from tests.accel_tpu.models import IndexedRegressor, indexed_loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--start-method", default=None)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    strategy = "auto" if args.start_method is None else torchplug_tpu_strategy(args.start_method)
    trainer = torchplug.Trainer(
        accelerator="tpu",
        devices="auto",
        strategy=strategy,
        max_epochs=args.epochs,
        default_root_dir=args.out,
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    model = IndexedRegressor(args.out, fail_rank=args.fail_rank)
    started = time.monotonic()
    try:
        trainer.fit(model, indexed_loader())
    except Exception as exc:
        result = {
            "error": type(exc).__name__,
            "message": str(exc),
            "notes": list(getattr(exc, "__notes__", [])),
            "seconds": time.monotonic() - started,
        }
    else:
        import torch_xla._fake

        result = {
            "strategy": type(trainer.strategy).__name__,
            "describe": trainer.describe(),
            "weights": [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])],
            "global_step": trainer.global_step,
            "train_loss": float(trainer.callback_metrics["train_loss"]),
            "best_model_path": trainer.checkpoint_callback.best_model_path,
            "checkpoint_io": type(trainer.checkpoint_io).__name__,
            "parent_started_runtime": torch_xla._fake.started,
            "spawn_calls": [c for c in torch_xla._fake.calls if c.startswith("spawn")],
        }
    with open(f"{args.out}/parent.json", "w") as file:
        json.dump(result, file)


def torchplug_tpu_strategy(start_method: str) -> object:
    from torchplug_tpu import XLAStrategy

    return XLAStrategy(start_method=start_method)


if __name__ == "__main__":
    main()
