"""Train with strategy='hpu_parallel' on two fake HPUs, as a user script would (the launcher re-runs it per rank).

Usage: train_hpu.py OUT [--epochs N]. Each rank writes OUT/rank-<r>.json with what its collectives
returned; rank 0 also writes OUT/parent.json with the final weights and the run's facts.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
import torch.distributed as dist

import torchplug
from tests.accel_hpu.models import Regressor, indexed_loader, weights


class IndexedRegressor(Regressor):
    """The Regressor on ``(x, y, index)`` batches; once training is over, exercises the collectives."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.indices: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.indices += [int(i) for i in batch[2]]
        return super().training_step(batch, batch_idx)

    def on_fit_end(self) -> None:
        strategy = self.trainer.strategy
        rank = strategy.global_rank
        try:
            dist.all_reduce(torch.tensor([1]))  # what the core's collectives would send: HCCL refuses it
            raw_long_refused = False
        except RuntimeError:
            raw_long_refused = True
        long_sum = strategy.reduce(torch.tensor([rank + 1, 10]), reduce_op="sum")
        record = {
            "rank": rank,
            "world_size": strategy.world_size,
            "backend": dist.get_backend(),
            "root_device": str(strategy.root_device),
            "indices": self.indices,
            "weights": weights(self),
            "raw_long_all_reduce_refused": raw_long_refused,
            "long_sum": long_sum.tolist(),
            "long_sum_dtype": str(long_sum.dtype),
            "long_max": strategy.reduce(torch.tensor(rank + 5), reduce_op="max").item(),
            "long_mean": float(strategy.reduce(torch.tensor(rank + 1), reduce_op="mean")),
            "double_sum": float(strategy.reduce(torch.tensor(rank + 0.5, dtype=torch.float64), reduce_op="sum")),
            "any": strategy.reduce_boolean_decision(rank == 1, all=False),
            "all": strategy.reduce_boolean_decision(rank == 1, all=True),
            "broadcast": strategy.broadcast({"from": rank, "pad": "x" * (10 + 100 * rank)}, src=1),
            "all_gather": strategy.all_gather(torch.tensor([float(rank), 10.0 * rank])).tolist(),
            "sampler": type(self.trainer.train_dataloader.sampler).__name__,
        }
        strategy.barrier("before-write")
        with open(f"{self.out}/rank-{rank}.json", "w") as file:
            json.dump(record, file)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    trainer = torchplug.Trainer(
        accelerator="hpu",
        devices=2,
        precision="bf16-mixed",
        max_epochs=args.epochs,
        default_root_dir=args.out,
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    model = IndexedRegressor(args.out)
    trainer.fit(model, indexed_loader())
    if trainer.global_rank == 0:
        import habana_frameworks.torch._fake as fake

        result = {
            "describe": trainer.describe(),
            "strategy": type(trainer.strategy).__name__,
            "weights": weights(model),
            "global_step": trainer.global_step,
            "train_loss": float(trainer.callback_metrics["train_loss"]),
            "best_model_path": trainer.checkpoint_callback.best_model_path,
            "mark_steps": fake.mark_steps,
            "autocast": sorted({f"{enabled}:{dtype}" for enabled, dtype in model.autocast}),
        }
        with open(f"{args.out}/parent.json", "w") as file:
            json.dump(result, file)


if __name__ == "__main__":
    main()
