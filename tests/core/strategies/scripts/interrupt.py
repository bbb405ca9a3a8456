"""Train the test Regressor slowly, so that a test can send SIGINT or SIGTERM in the middle of ``fit``.

``python interrupt.py --root DIR [options]``: logs to a CSVLogger (one row per step) and checkpoints
with a ModelCheckpoint under DIR. Once rank 0 reaches ``--ready-step``, it writes ``DIR/ready``
(holding the pids of every rank); a test waits for it, then sends its signal. A fit that ends writes
``DIR/final_rank<R>.pt`` (the weights) and prints ``FINISHED <global step>``.
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

import torchplug
from torchplug.callbacks.callback import Callback
from torchplug.callbacks.model_checkpoint import ModelCheckpoint
from torchplug.loggers.csv_logs import CSVLogger

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common


class Slow(common.Regressor):
    """Each step sleeps ``pause`` seconds, and logs its loss at every step."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.pause)
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss)
        return loss


class Ready(Callback):
    """Rank 0 writes ``<root>/ready`` (every rank's pid) at ``step``; every rank records its pid first."""

    def __init__(self, root: Path, step: int) -> None:
        self.root = root
        self.step = step

    def on_train_start(self, trainer: Any, module: Any) -> None:
        (self.root / f"pid_rank{trainer.global_rank}").write_text(str(os.getpid()))

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step and trainer.is_global_zero:
            pids = {p.name: int(p.read_text()) for p in self.root.glob("pid_rank*")}
            (self.root / "ready.tmp").write_text(json.dumps(pids))
            os.replace(self.root / "ready.tmp", self.root / "ready")


class SlowInterruption(Callback):
    """Makes the exception hooks take ``seconds`` (a slow interruption checkpoint), to test a second signal."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        (Path(os.environ["INTERRUPT_ROOT"]) / f"winding_down_rank{trainer.global_rank}").write_text("")
        time.sleep(self.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", required=True)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--ready-step", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds each training_step sleeps")
    parser.add_argument("--slow-exception-hooks", type=float, default=0.0)
    parser.add_argument("--resume", help="fit(ckpt_path=...)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["INTERRUPT_ROOT"] = str(root)
    callbacks: list[Callback] = [
        Ready(root, args.ready_step),
        ModelCheckpoint(dirpath=str(root / "ckpts"), every_n_train_steps=10_000),
    ]
    if args.slow_exception_hooks:
        callbacks.insert(0, SlowInterruption(args.slow_exception_hooks))
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=args.strategy,
        max_steps=args.max_steps,
        logger=CSVLogger(str(root), version="run"),
        log_every_n_steps=1,
        callbacks=callbacks,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
    )
    torch.manual_seed(common.SEED)
    model = Slow(args.pause)
    trainer.fit(model, common.loader(64, 8, shuffle=False), ckpt_path=args.resume)
    torch.save(model.state_dict(), root / f"final_rank{trainer.global_rank}.pt")
    print("FINISHED", trainer.global_step, flush=True)


if __name__ == "__main__":
    main()
