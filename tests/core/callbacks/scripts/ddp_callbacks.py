"""The catalogue's callbacks in a real 2-process DDP fit over gloo; every rank records what it saw.

Run by ``tests/core/callbacks/test_ddp.py`` as ``python ddp_callbacks.py --scenario NAME --out DIR``;
``strategy="ddp"`` re-runs this same command line for rank 1. Each rank writes
``rank<R>.pt`` (weights and what the scenario records) for the test to compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

import torchplug
from torchplug.callbacks import (
    BackboneFinetuning,
    BasePredictionWriter,
    DeviceStatsMonitor,
    EMAWeightAveraging,
    LearningRateFinder,
    ModelCheckpoint,
    ModelPruning,
    OnExceptionCheckpoint,
    SpikeDetection,
    StochasticWeightAveraging,
    ThroughputMonitor,
    Timer,
)
from torchplug.loggers.csv_logs import CSVLogger

sys.path.insert(0, str(Path(__file__).parents[4]))
from tests.core.strategies.scripts import common


class Net(common.Regressor):
    """The Regressor of the strategy tests, optionally with batch norm, a loss spike, a crash or slow steps."""

    def __init__(
        self,
        batch_norm: bool = False,
        spike_rank: int = -1,
        crash_step: int = -1,
        sleep: float = 0.0,
        backbone: bool = False,
    ) -> None:
        super().__init__()
        if backbone:  # BackboneFinetuning freezes it before DDP wraps the model
            self.backbone = self.net[0]
        if batch_norm:
            self.net = torch.nn.Sequential(
                torch.nn.Linear(common.IN, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
            )
        self.spike_rank = spike_rank
        self.crash_step = crash_step
        self.sleep = sleep

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.crash_step:
            raise RuntimeError(f"planned failure at step {self.crash_step}")
        if self.sleep:
            time.sleep(self.sleep)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        if self.global_rank == self.spike_rank and batch_idx == 3:
            loss = loss * 1000.0  # a corrupt batch on this rank only
        return loss

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


class Writer(BasePredictionWriter):
    """Saves every batch's predictions with their indices, and the whole epoch's, per rank."""

    def __init__(self, out: Path) -> None:
        super().__init__(write_interval="batch_and_epoch")
        self.out = out
        self.batches: list[tuple[list[int], torch.Tensor]] = []

    def write_on_batch_end(self, trainer, module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((list(batch_indices), prediction.detach().clone()))

    def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
        torch.save(
            {"batches": self.batches, "epoch_predictions": predictions, "epoch_indices": batch_indices},
            self.out / f"predictions_rank{trainer.global_rank}.pt",
        )


def scenario_callbacks(name: str, out: Path) -> list[Any]:
    if name == "ema":
        return [
            LearningRateFinder(num_training_steps=14, min_lr=1e-4, max_lr=0.5),
            EMAWeightAveraging(decay=0.9),
            ThroughputMonitor(batch_size_fn=lambda batch: int(batch[0].shape[0]), window_size=2),
            DeviceStatsMonitor(),
            Timer(),
        ]
    if name in ("swa", "swa-resume"):
        return [
            StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=1),
            ModelCheckpoint(dirpath=str(out.parent / "swa-ckpts"), save_top_k=-1, every_n_epochs=1),
        ]
    if name in ("exception", "exception-resume"):
        return [OnExceptionCheckpoint(dirpath=str(out.parent / "exception"))]
    if name == "spike":
        return [SpikeDetection(exclude_batches_path=str(out / "skip.json"))]
    if name == "timer":
        timed = ModelCheckpoint(dirpath=str(out / "timed"), train_time_interval=timedelta(seconds=0.4), save_top_k=-1)
        return [Timer(duration={"seconds": 1}), ModelPruning("random_unstructured", amount=0.3), Writer(out), timed]
    if name == "finetune":
        return [BackboneFinetuning(unfreeze_backbone_at_epoch=1)]
    raise SystemExit(f"unknown scenario {name!r}")


def tune_with_spawned_workers(out: Path) -> None:
    """Tuner.lr_find under ddp_spawn: the search runs in the workers, its result must reach this process."""
    from torchplug.tuner import Tuner

    torch.manual_seed(common.SEED)
    model = Net()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=str(out / "root"),
    )
    finder = Tuner(trainer).lr_find(model, train_dataloaders=common.loader(160, 8), num_training=14)
    assert finder is not None
    torch.save(
        {
            "results": finder.results,
            "suggestion": finder.suggestion(),
            "lr": model.hparams.lr,
            "unchanged": all(torch.equal(v, before[k]) for k, v in model.state_dict().items()),
            "global_step": trainer.global_step,
        },
        out / "main.pt",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    name = args.scenario
    if name == "tune-spawn":
        tune_with_spawned_workers(out)
        return
    torch.manual_seed(common.SEED)
    model = Net(
        batch_norm=name.startswith("swa"),
        spike_rank=1 if name == "spike" else -1,
        crash_step=5 if name == "exception" else -1,
        sleep=0.15 if name == "timer" else 0.0,
        backbone=name == "finetune",
    )
    record_start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    callbacks = scenario_callbacks(name, out)
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=4 if name.startswith("swa") or name == "finetune" else (20 if name == "timer" else 2),
        logger=CSVLogger(str(out / "logs")) if name == "ema" else False,
        callbacks=callbacks,
        enable_checkpointing=name.startswith("swa") or name == "timer",
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        default_root_dir=str(out / "root"),
    )
    record: dict[str, Any] = {"rank": trainer.global_rank, "start": record_start}
    if os.environ.get("FINETUNE_WITHOUT_SYNC"):  # to see what the gradient averaging prevents (by hand only)
        callbacks[0].on_before_optimizer_step = lambda *args: None
    try:
        trainer.fit(model, common.loader(160 if name == "ema" else 64, 8), ckpt_path=args.resume)
    except Exception as exc:  # the scenarios that fail on purpose record how
        record["error"] = f"{type(exc).__name__}: {exc}"
    record["global_step"] = trainer.global_step
    record["state_dict"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if name == "ema":
        trainer.save_checkpoint(str(out / "final.ckpt"))
        finder = callbacks[0].optimal_lr
        record["lr_finder"] = finder.results
        record["lr"] = model.hparams.get("lr", getattr(model, "lr", None))
        record["optimizer_lr"] = trainer.optimizers[0].param_groups[0]["lr"]
        record["timer_train"] = callbacks[4].time_elapsed("train")
    if name == "timer":
        record["timer_train"] = callbacks[0].time_elapsed("train")
        record["timed_checkpoint"] = callbacks[3].best_model_path  # the latest
        loader = common.loader(30, 4, shuffle=False)
        trainer.predict(model, loader, return_predictions=False)
    # Atomically: in the scenarios that fail on purpose the launcher may stop rank 1 while it writes.
    partial = out / f".rank{trainer.global_rank}.pt.partial"
    torch.save(record, partial)
    os.replace(partial, out / f"rank{trainer.global_rank}.pt")
    if "error" in record and trainer.global_rank == 0 and os.environ.get("REPORT_ERRORS"):
        print(record["error"])


if __name__ == "__main__":
    main()
