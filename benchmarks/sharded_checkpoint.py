"""Sharded against full FSDP checkpoints, 2 processes: our paths beside plain torch.distributed.checkpoint calls.

What is measured:
    ``--layers`` (default 12) ``Linear(--width, --width)`` layers (width 4096: 201M float32
    parameters, 805 MB) sharded by ``FSDPStrategy`` over 2 CPU processes (gloo), after one
    training step with SGD with momentum (so the optimizer state is as big as the model; use
    ``--no-momentum`` to leave it empty). In ``on_train_end`` both processes run, per round and in
    a rotating order, after one untimed warm-up round and ``os.sync()`` before each operation:

    ==========================  =====================================================================
    full save (ours)            ``trainer.save_checkpoint(FILE)``, ``state_dict_type="full"``: the state
                                gathered on rank 0, one file through ``TorchCheckpointIO``
    full save (raw)             DCP's ``get_*_state_dict(full_state_dict=True, cpu_offload=True)`` and
                                ``torch.save`` on rank 0
    sharded save (ours)         ``trainer.save_checkpoint(DIR)``, ``state_dict_type="sharded"``, ``dcp`` IO
    sharded save (raw DCP)      ``dcp.save({"model": ..., "optim": ...}, checkpoint_id=DIR)``
    async sharded (ours)        ``trainer.save_checkpoint(DIR)`` with the ``dcp_async`` IO (prepared as
                                after the first step): the time the loop is blocked; then until durable
    async sharded (raw DCP)     ``dcp.async_save(...)`` with DCP's ``DefaultStager`` (cached, shared
                                memory) and the process executor, as ours: blocked, then until done
    sharded load (ours/raw)     ``strategy.load_checkpoint(DIR)`` and loading the model and optimizer
                                states (what a resume does) / ``dcp.load`` and ``set_*_state_dict``
    full load (ours/raw)        the same from the file / ``torch.load`` and ``set_*_state_dict(full)``
    ==========================  =====================================================================

    All save rounds run first, then all load rounds (a load replaces the parameters' storages,
    which training never does between two saves, and both asynchronous paths keep their staging
    memory per storage). Our saves replace the checkpoint of the previous round (as ``last.ckpt``
    is replaced), the raw calls write a new one each time (the old one is removed, untimed): the
    comparison leans in the raw calls' favour. Before each load the checkpoint files are dropped
    from the page cache (``posix_fadvise(DONTNEED)``), so every load reads from the disk, as after a
    restart, whatever the order of the operations left in memory.

    Wall time: from a barrier before to a barrier after (the slowest process). Peak RSS: each
    process samples its own resident memory every 2 ms during the operation; reported is the peak
    above the level before it, per rank. Bytes written: the size of what the operation left on the
    disk (each rank's shard files for sharded checkpoints). Medians over ``--repeats`` rounds.

    Targets: our sharded save, sharded load and async blocked time each within 1.1x of the raw DCP
    calls; the async sharded save blocks the loop for at most 10% of a synchronous sharded save.
    Ratios are the median over rounds of the ratio within a round (both operations measured in the
    same round), steadier than a ratio of medians on a shared host.

How to run it (from the repository root, with the dev venv)::

    python benchmarks/sharded_checkpoint.py                       # 201M parameters, 3 rounds
    python benchmarks/sharded_checkpoint.py --layers 3 --repeats 5 --json

The Trainer starts the second process itself (it re-runs this command). Needs about 4 GB of free
memory per process at the default size and 2 GB of disk per operation (removed after each). On
the 2-core shared host the figures vary by ±30% from run to run: compare the ratios taken in the
same run. Exit status: 0 when every target passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from _timing import add_json_option, write_json
from torchplug.io import DistributedCheckpointIO, TorchCheckpointIO
from torchplug.strategies.fsdp import FSDPStrategy

RAW_TARGET: Final = 1.10
BLOCK_TARGET: Final = 0.10
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)

Op = Callable[[], float | None]  # runs once on every rank; returns seconds to record instead of the wall time


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12, help="Linear layers (default 12: 201M parameters)")
    parser.add_argument("--width", type=int, default=4096, help="their width (default 4096)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--no-momentum", action="store_true", help="SGD without momentum: no optimizer state")
    add_json_option(parser)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    return parser.parse_args(argv)


class Model(torchplug.Module):
    def __init__(self, layers: int, width: int, momentum: float) -> None:
        super().__init__()
        self.momentum = momentum
        with torch.no_grad():
            self.net = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.net(x).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-4, momentum=self.momentum)


class RssPeak:
    """Samples this process's resident memory every 2 ms in a thread; ``peak`` is the highest seen."""

    def __init__(self) -> None:
        self.peak = self.base = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _evict(root: Path) -> None:
    """Drop the (clean, synced) pages of every file under ``root`` from the page cache: reads start cold."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


class Bench(torchplug.Callback):
    """Runs every operation in ``on_train_end`` (every process), rank 0 prints the report."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.samples: dict[str, list[dict[str, Any]]] = {}

    def on_train_end(self, trainer: Any, module: Any) -> None:
        strategy: FSDPStrategy = trainer.strategy
        optimizer = trainer.optimizers[0]
        rank = trainer.global_rank
        group = dist.new_group(backend="gloo")
        raw_stager = DefaultStager(StagingOptions(False, True, False, False))
        ours_sync, ours_async = DistributedCheckpointIO(), DistributedCheckpointIO(async_save=True)
        ours_async.prepare(
            {
                "state_dict": get_model_state_dict(module),
                "optimizer_states": [get_optimizer_state_dict(module, optimizer)],
            }
        )
        full_io = TorchCheckpointIO()
        paths = {
            name: self.root / name
            for name in ("full.ckpt", "raw-full.pt", "sharded", "raw-sharded", "async", "raw-async")
        }
        pending: list[Any] = []

        def use(state_dict_type: str, io: Any) -> None:  # the benchmark switches the strategy's mode between ops
            strategy.state_dict_type = state_dict_type
            strategy.checkpoint_io = io

        def raw_state(full: bool = False) -> dict[str, Any]:
            options = FULL if full else None
            return {
                "model": get_model_state_dict(module, options=options),
                "optim": get_optimizer_state_dict(module, optimizer, options=options),
            }

        def full_save() -> None:
            use("full", full_io)
            trainer.save_checkpoint(paths["full.ckpt"])

        def raw_full_save() -> None:
            state = raw_state(full=True)
            if rank == 0:
                torch.save(state, paths["raw-full.pt"])

        def sharded_save() -> None:
            use("sharded", ours_sync)
            trainer.save_checkpoint(paths["sharded"])

        def raw_sharded_save() -> None:
            state_dict_saver.save(raw_state(), checkpoint_id=str(paths["raw-sharded"]))

        def async_save() -> float:
            use("sharded", ours_async)
            start = time.perf_counter()
            trainer.save_checkpoint(paths["async"])
            blocked = time.perf_counter() - start
            pending.append(("async", time.perf_counter(), ours_async.flush))
            return blocked

        def raw_async_save() -> float:
            start = time.perf_counter()
            future = state_dict_saver.async_save(
                raw_state(),
                checkpoint_id=str(paths["raw-async"]),
                process_group=group,
                async_checkpointer_type=AsyncCheckpointerType.PROCESS,
                async_stager=raw_stager,
            )
            blocked = time.perf_counter() - start
            pending.append(("raw-async", time.perf_counter(), future.result))
            return blocked

        def sharded_load() -> None:
            use("sharded", ours_sync)
            checkpoint = strategy.load_checkpoint(str(paths["sharded"]))
            strategy.load_module_state_dict(checkpoint["state_dict"])
            strategy.load_optimizer_state_dict(optimizer, checkpoint["optimizer_states"][0])

        def raw_sharded_load() -> None:
            state = raw_state()
            state_dict_loader.load(state, checkpoint_id=str(paths["raw-sharded"]))
            set_model_state_dict(module, state["model"])
            set_optimizer_state_dict(module, optimizer, state["optim"])

        def full_load() -> None:
            use("full", full_io)
            checkpoint = strategy.load_checkpoint(str(paths["full.ckpt"]))
            strategy.load_module_state_dict(checkpoint["state_dict"])
            strategy.load_optimizer_state_dict(optimizer, checkpoint["optimizer_states"][0])

        def raw_full_load() -> None:
            state = torch.load(paths["raw-full.pt"], weights_only=True)
            set_model_state_dict(module, state["model"], options=StateDictOptions(full_state_dict=True))
            set_optimizer_state_dict(module, optimizer, state["optim"], options=StateDictOptions(full_state_dict=True))

        saves: dict[str, tuple[Op, str]] = {
            "full save (ours)": (full_save, "full.ckpt"),
            "full save (raw)": (raw_full_save, "raw-full.pt"),
            "sharded save (ours)": (sharded_save, "sharded"),
            "sharded save (raw DCP)": (raw_sharded_save, "raw-sharded"),
            "async sharded save, blocked (ours)": (async_save, "async"),
            "async sharded save, blocked (raw DCP)": (raw_async_save, "raw-async"),
        }
        loads: dict[str, tuple[Op, str]] = {
            "sharded load (ours)": (sharded_load, ""),
            "sharded load (raw DCP)": (raw_sharded_load, ""),
            "full load (ours)": (full_load, ""),
            "full load (raw)": (raw_full_load, ""),
        }
        # Every save round first, then every load round: a load replaces the parameters' storages,
        # which a training loop never does between two saves, and the staging memory of both
        # asynchronous paths is kept per storage.
        for group_ops in (saves, loads):
            if group_ops is loads:  # the staging memory of the asynchronous saves goes back to the page cache
                ours_async.teardown()
                raw_stager.close()
            for round_ in range(self.args.repeats + 1):
                names = list(group_ops)
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    op, written = group_ops[name]
                    if "raw" in name and written:  # the raw baseline writes a new checkpoint (ours replaces one)
                        self._remove(trainer, self.root / written)
                    self._one(trainer, name, op, written, round_ > 0, pending)
        for path in paths.values():
            self._remove(trainer, path)
        use("sharded", ours_sync)
        gathered: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(gathered, self.samples)
        if rank == 0:
            self.report(gathered, trainer)

    @staticmethod
    def _remove(trainer: Any, path: Path) -> None:
        """Delete ``path`` on rank 0 (untimed), every rank waiting for it."""
        dist.barrier()
        if trainer.global_rank == 0:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        dist.barrier()

    def _one(self, trainer: Any, name: str, op: Op, written: str, keep: bool, pending: list[Any]) -> None:
        dist.barrier()
        os.sync()
        if not written:  # a load: every checkpoint is read from the disk, as after a restart
            _evict(self.root)
        dist.barrier()
        with RssPeak() as rss:
            start = time.perf_counter()
            recorded = op()
            dist.barrier()
            wall = time.perf_counter() - start
        sample: dict[str, Any] = {"seconds": wall if recorded is None else recorded, "rss": rss.peak - rss.base}
        for label, submitted, wait in pending:  # an asynchronous save: until it is durable
            wait()
            sample["durable_seconds"] = time.perf_counter() - submitted + sample["seconds"]
            del label
        pending.clear()
        dist.barrier()
        if written:
            path = self.root / written
            sample["bytes"] = _size(path)
            if path.is_dir():
                sample["rank_bytes"] = sum(p.stat().st_size for p in path.glob(f"__{trainer.global_rank}_*"))
        if keep:
            self.samples.setdefault(name, []).append(sample)

    def report(self, gathered: list[dict[str, list[dict[str, Any]]]], trainer: Any) -> None:
        args = self.args
        names = list(gathered[0])
        median = statistics.median
        rows = {}
        for name in names:
            per_rank = [g[name] for g in gathered]
            seconds = median(max(r[i]["seconds"] for r in per_rank) for i in range(len(per_rank[0])))
            row = {
                "seconds": seconds,
                "peak_rss_mb_per_rank": [median(s["rss"] for s in r) / 1e6 for r in per_rank],
                "bytes": per_rank[0][0].get("bytes"),
            }
            if "rank_bytes" in per_rank[0][0]:
                row["bytes_per_rank"] = [r[0]["rank_bytes"] for r in per_rank]
            if "durable_seconds" in per_rank[0][0]:
                row["durable_seconds"] = median(
                    max(r[i]["durable_seconds"] for r in per_rank) for i in range(len(per_rank[0]))
                )
            rows[name] = row

        def per_round(name: str) -> list[float]:  # the slowest process, round by round
            per_rank = [g[name] for g in gathered]
            return [max(r[i]["seconds"] for r in per_rank) for i in range(len(per_rank[0]))]

        def ratio(a: str, b: str) -> float:
            """The median of the per-round ratios (both measured in the same round: steadier on a busy host)."""
            return float(median(x / y for x, y in zip(per_round(a), per_round(b))))

        ratios = {
            "sharded save: ours / raw DCP": ratio("sharded save (ours)", "sharded save (raw DCP)"),
            "sharded load: ours / raw DCP": ratio("sharded load (ours)", "sharded load (raw DCP)"),
            "async blocked: ours / raw DCP": ratio(
                "async sharded save, blocked (ours)", "async sharded save, blocked (raw DCP)"
            ),
            "async blocked / sharded save (ours)": ratio("async sharded save, blocked (ours)", "sharded save (ours)"),
            "sharded save / full save (ours)": ratio("sharded save (ours)", "full save (ours)"),
            "sharded load / full load (ours)": ratio("sharded load (ours)", "full load (ours)"),
            "full save: ours / raw": ratio("full save (ours)", "full save (raw)"),
        }
        targets = {
            "sharded save: ours / raw DCP": RAW_TARGET,
            "sharded load: ours / raw DCP": RAW_TARGET,
            "async blocked: ours / raw DCP": RAW_TARGET,
            "async blocked / sharded save (ours)": BLOCK_TARGET,
        }
        parameters = sum(p.numel() for p in trainer.module.parameters())
        doc = {
            "benchmark": "sharded vs full checkpoints, FSDP, 2 processes",
            "parameters": parameters,
            "momentum": not args.no_momentum,
            "repeats": args.repeats,
            "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
            "load_average": os.getloadavg(),
            "operations": rows,
            "ratios": ratios,
            "targets": {k: {"max": v, "passed": ratios[k] <= v} for k, v in targets.items()},
        }
        doc["ok"] = all(t["passed"] for t in doc["targets"].values())
        (self.root / "report.json").write_text(json.dumps(doc))
        if args.json != "-":
            print(report_text(doc), flush=True)
        if args.json:
            write_json(doc, args.json)


def report_text(doc: dict[str, Any]) -> str:
    lines = [
        f"Checkpoints of {doc['parameters']:,} float32 parameters sharded by FSDP over 2 processes (gloo), "
        f"SGD {'with' if doc['momentum'] else 'without'} momentum; median of {doc['repeats']} rotating rounds; "
        f"{doc['machine']['cpus']} CPUs, torch {doc['machine']['torch']}",
        "",
        f"{'operation':42} {'wall':>8} {'durable':>8} {'peak RSS +MB r0/r1':>20} {'bytes written (per rank)':>30}",
    ]
    for name, row in doc["operations"].items():
        rss = "/".join(f"{mb:.0f}" for mb in row["peak_rss_mb_per_rank"])
        durable = f"{row['durable_seconds']:7.2f}s" if "durable_seconds" in row else ""
        size = f"{row['bytes'] / 1e6:.0f} MB" if row.get("bytes") else ""
        if "bytes_per_rank" in row:
            size += " (" + "/".join(f"{b / 1e6:.0f}" for b in row["bytes_per_rank"]) + ")"
        lines.append(f"{name:42} {row['seconds']:7.3f}s {durable:>8} {rss:>20} {size:>30}")
    lines += ["", f"{'ratio (median of the per-round ratios)':42} {'value':>8}   target"]
    for name, value in doc["ratios"].items():
        target = doc["targets"].get(name)
        shown = f"{value:7.1%}" if "blocked /" in name else f"{value:7.2f}x"
        verdict = f"<= {target['max']:g}  {'PASS' if target['passed'] else 'FAIL'}" if target else ""
        lines.append(f"{name:42} {shown:>8}   {verdict}")
    load = ", ".join(f"{x:.2f}" for x in doc["load_average"])
    lines.append(f"(load average at the end: {load}; the host is shared: figures vary by ±30% between runs)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    root = Path(
        os.environ.setdefault("TORCHPLUG_BENCH_DIR", tempfile.mkdtemp(prefix="torchplug-sharded-", dir=args.dir))
    )
    torch.manual_seed(0)
    model = Model(args.layers, args.width, 0.0 if args.no_momentum else 0.9)
    data = DataLoader(TensorDataset(torch.randn(8, args.width)), batch_size=4)
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=FSDPStrategy(state_dict_type="sharded"),
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=[Bench(args, root)],
    )
    try:
        trainer.fit(model, data)
        if not trainer.is_global_zero:
            return 0  # the report and the verdict are rank 0's
        report = root / "report.json"
        return 0 if report.is_file() and json.loads(report.read_text())["ok"] else 1
    finally:
        if trainer.is_global_zero:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
