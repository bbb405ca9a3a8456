"""Train the core tests' Regressor under a DeepSpeed strategy; every rank records what it sees.

Run by the tests as ``python train.py --out DIR [options]``; the ``popen`` launcher re-runs this
same command line for rank 1. Records (see ``tests/core/strategies/scripts/common.py``):
``rank<R>.json``/``rank<R>.pt`` at the end of fit (``rank0.pt``: the full, gathered state dict),
and ``engine_rank<R>.json`` with what DeepSpeed was set up with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

import torchplug
from torchplug.callbacks.callback import Callback

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.core.strategies.scripts import common


class Regressor(common.Regressor):
    """The core tests' Regressor, with a validation loss."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x).float(), y.float()), sync_dist=True)


class ShardedHeadRegressor(Regressor):
    """The Regressor with a head built in ``setup`` inside ``model_sharded_context`` (partitioned at creation)."""

    def setup(self, stage: str) -> None:
        with self.trainer.strategy.model_sharded_context():
            self.head = torch.nn.Linear(1, 1)
        common.write_json(
            Path(os.environ["SHARDED_OUT"]) / f"head_rank{self.global_rank}.json",
            {"partitioned": hasattr(self.head.weight, "ds_numel")},
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(super().forward(x))  # type: ignore[no-any-return]


class ScheduledRegressor(Regressor):
    """The Regressor with a per-step learning-rate schedule (its state must survive a resume)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class EngineRecorder(Callback):
    """Writes ``engine_rank<R>.json``: DeepSpeed's accelerator, the final config, dtypes and the step count."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def on_train_start(self, trainer: Any, module: Any) -> None:
        from deepspeed.accelerator import get_accelerator

        strategy = trainer.strategy
        engine = strategy.deepspeed_engine
        record = {
            "ds_accelerator": get_accelerator()._name,
            "config": strategy.config,
            "param_dtype": str(next(module.parameters()).dtype),
            "engine": type(engine).__name__,
            "optimizer": type(engine.optimizer).__name__,
            "zero_stage": engine.zero_optimization_stage(),
            "backend": torch.distributed.get_backend(),
            "precision": repr(strategy.precision),
        }
        common.write_json(self.out / f"engine_rank{trainer.global_rank}.json", record)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="deepspeed_stage_2", help="a registry name")
    parser.add_argument("--config-json", help="DeepSpeedStrategy(config=PATH)")
    parser.add_argument("--config-dict", help="DeepSpeedStrategy(config=json.loads(TEXT))")
    parser.add_argument("--strategy-args", help="DeepSpeedStrategy(**json.loads(TEXT))")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--clip", type=float, default=None)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--scheduler", action="store_true", help="the ScheduledRegressor")
    parser.add_argument("--sharded-head", action="store_true", help="the ShardedHeadRegressor")
    parser.add_argument("--checkpoint-dir", help="a ModelCheckpoint there, every step")
    parser.add_argument("--keep", type=int, default=-1, help="its save_top_k (-1: every checkpoint)")
    parser.add_argument("--save-ckpt", help="trainer.save_checkpoint(PATH) after fit")
    parser.add_argument("--save-weights", help="trainer.save_checkpoint(PATH, weights_only=True) after fit")
    parser.add_argument("--resume", help="fit(ckpt_path=PATH)")
    parser.add_argument("--validate-ckpt", help="after fit: trainer.validate(ckpt_path=PATH), metrics to validate.json")
    return parser.parse_args(argv)


def strategy_of(args: argparse.Namespace) -> Any:
    from torchplug_deepspeed import DeepSpeedStrategy

    if args.config_json:
        return DeepSpeedStrategy(config=args.config_json)
    if args.config_dict:
        return DeepSpeedStrategy(config=json.loads(args.config_dict))
    if args.strategy_args:
        return DeepSpeedStrategy(**json.loads(args.strategy_args))
    return args.strategy


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.set_num_threads(1)
    callbacks: list[Callback] = [common.Recorder(args.out, full_state=True), EngineRecorder(args.out)]
    if args.checkpoint_dir:
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint

        callbacks.append(ModelCheckpoint(dirpath=args.checkpoint_dir, every_n_train_steps=1, save_top_k=args.keep))
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy_of(args),
        precision=args.precision,
        max_epochs=args.epochs,
        max_steps=args.max_steps,
        logger=False,
        callbacks=callbacks,
        enable_checkpointing=bool(args.checkpoint_dir),
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        accumulate_grad_batches=args.accumulate,
        gradient_clip_val=args.clip,
        default_root_dir=args.out,
    )
    model_class = ScheduledRegressor if args.scheduler else ShardedHeadRegressor if args.sharded_head else Regressor
    os.environ["SHARDED_OUT"] = args.out
    model = model_class(dropout=args.dropout)
    trainer.fit(model, common.loader(args.samples, args.batch_size), ckpt_path=args.resume)
    if args.save_ckpt:
        trainer.save_checkpoint(args.save_ckpt)
    if args.save_weights:
        trainer.save_checkpoint(args.save_weights, weights_only=True)
    if args.validate_ckpt:
        results = trainer.validate(
            model, common.loader(args.samples, args.batch_size, shuffle=False), ckpt_path=args.validate_ckpt
        )
        if trainer.is_global_zero:
            common.write_json(Path(args.out) / "validate.json", {"results": results})
    common.write_json(Path(args.out) / f"done_{os.getpid()}.json", {"global_step": trainer.global_step})


if __name__ == "__main__":
    main()
