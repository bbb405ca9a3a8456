"""Train the test Regressor with a multi-process strategy; every rank records what it sees (see common.py).

Run by the tests as ``python train.py --out DIR [options]``, directly (strategy="ddp" re-runs this
same command line for rank 1), or under ``torchrun``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

import torchplug
from torchplug.callbacks.callback import Callback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for the records")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", default="2")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--unused", action="store_true", help="a model with a parameter outside the loss")
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-step", type=int, default=-1)
    parser.add_argument(
        "--crash-how",
        choices=("raise", "kill"),
        default="raise",
        help="raise an error, or SIGKILL the process (no Python clean-up at all)",
    )
    parser.add_argument(
        "--stall-rank",
        type=int,
        default=-1,
        help="this rank sleeps for an hour at --crash-step (stuck outside any collective)",
    )
    parser.add_argument(
        "--crash-once",
        action="store_true",
        help="crash only in the first run, not after torchrun restarted the workers (TORCHELASTIC_RESTART_COUNT)",
    )
    parser.add_argument("--catch", action="store_true", help="record the error fit raised in error_<pid>.json")
    parser.add_argument("--log-sync", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--csv-logger", action="store_true", help="log to a CSVLogger under --root")
    parser.add_argument("--logger", action="append", default=[], help="a logger by registry name (repeatable)")
    parser.add_argument("--checkpoint", action="store_true", help="a ModelCheckpoint saving every step")
    parser.add_argument(
        "--default-ckpt-dir",
        action="store_true",
        help="--checkpoint without a dirpath: <log_dir>/checkpoints, decided at setup",
    )
    parser.add_argument("--count-writes", help="log file of every checkpoint write (through the CheckpointIO)")
    parser.add_argument("--root", help="default_root_dir")
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--wrap-linear", action="store_true", help="FSDP: shard each Linear on its own")
    parser.add_argument("--start-method", default="popen", help="FSDP: how the processes start")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--clip", type=float, default=None)
    parser.add_argument("--save-ckpt", help="trainer.save_checkpoint(PATH) after fit, on every rank")
    parser.add_argument("--resume", help="fit(ckpt_path=PATH)")
    parser.add_argument("--full-state", action="store_true", help="gather the state dict through the strategy")
    parser.add_argument("--precision", default=None, help="Trainer(precision=...)")
    parser.add_argument("--sharded", action="store_true", help="FSDP: state_dict_type='sharded' (DCP checkpoints)")
    parser.add_argument("--io", help="a checkpoint IO by name, in plugins= (dcp, dcp_async...)")
    parser.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    parser.add_argument("--rank-rng", action="store_true", help="set each rank's random state apart")
    parser.add_argument("--record-restored", action="store_true", help="restored_rank<R>.pt at the first batch")
    parser.add_argument("--top-k", type=int, default=-1, help="ModelCheckpoint(save_top_k=...) with --checkpoint")
    parser.add_argument("--manual", action="store_true", help="manual optimization (--clip through clip_gradients)")
    parser.add_argument("--test", type=int, default=0, help="after fit, trainer.test() on this many samples")
    parser.add_argument(
        "--data", default="map", choices=("map", "stream", "stream-sharded"), help="a map-style dataset or a stream"
    )
    return parser.parse_args(argv)


def strategy_of(args: argparse.Namespace) -> Any:
    if args.strategy == "fsdp" and (args.wrap_linear or args.start_method != "popen" or args.sharded):
        from torchplug.strategies.fsdp import FSDPStrategy

        return FSDPStrategy(
            auto_wrap_policy={torch.nn.Linear} if args.wrap_linear else None,
            start_method=args.start_method,
            state_dict_type="sharded" if args.sharded else "full",
        )
    return args.strategy


def callbacks_of(args: argparse.Namespace) -> list[Callback]:
    callbacks: list[Callback] = [common.Recorder(args.out, full_state=args.full_state)]
    if args.rank_rng:
        callbacks.append(common.RankRandomness())
    if args.record_restored:
        callbacks.append(common.RestoredRecorder(args.out))
    if args.checkpoint:
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint

        dirpath = None if args.default_ckpt_dir else os.path.join(args.root, "ckpts")
        callbacks.append(ModelCheckpoint(dirpath=dirpath, every_n_train_steps=1, save_top_k=args.top_k, save_last=True))
    return callbacks


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.set_num_threads(1)
    logger: Any = False
    if args.csv_logger:
        from torchplug.loggers.csv_logs import CSVLogger

        logger = CSVLogger(args.root)
    if args.logger:
        logger = [*([logger] if logger is not False else []), *args.logger]
    plugins: Any = [common.CountingCheckpointIO(args.count_writes)] if args.count_writes else None
    if args.io:
        plugins = [args.io]
    devices = int(args.devices) if args.devices.isdigit() else args.devices
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=devices,
        num_nodes=args.num_nodes,
        strategy=strategy_of(args),
        plugins=plugins,
        precision=args.precision,
        max_epochs=args.epochs,
        max_steps=args.max_steps,
        logger=logger,
        callbacks=callbacks_of(args),
        enable_checkpointing=args.checkpoint,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        log_every_n_steps=args.log_every,
        accumulate_grad_batches=args.accumulate,
        gradient_clip_val=None if args.manual else args.clip,
        default_root_dir=args.root,
    )
    common.write_json(
        Path(args.out) / f"constructed_{os.getpid()}.json",
        {
            "global_rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "is_global_zero": trainer.is_global_zero,
        },
    )
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if args.manual:
        model: common.Regressor = common.ManualRegressor(clip=args.clip, dropout=args.dropout)
    else:
        model = common.Regressor(
            unused=args.unused,
            crash_rank=-1 if args.crash_once and restarted else args.crash_rank,
            crash_step=args.crash_step,
            crash_how=args.crash_how,
            stall_rank=args.stall_rank,
            log_sync=args.log_sync,
            dropout=args.dropout,
            optimizer=args.optimizer,
        )
    try:
        if args.data == "map":
            data = common.loader(args.samples, args.batch_size)
        else:
            data = common.stream_loader(args.samples, args.batch_size, sharded=args.data == "stream-sharded")
        trainer.fit(model, data, ckpt_path=args.resume)
    except Exception as exc:
        if args.catch:
            common.write_error(args.out, exc)
        raise
    if args.test:
        trainer.test(model, common.loader(args.test, args.batch_size, shuffle=False), verbose=False)
    if args.save_ckpt:
        trainer.save_checkpoint(args.save_ckpt)
    common.write_main(args.out, trainer, model)


if __name__ == "__main__":
    main()
