"""DDP on the CPU: ``Trainer(devices=2, strategy="ddp")`` against a plain torch DDP loop, 2 processes, gloo.

What is measured:
    The setup of reference-figures.md section 4 (PyTorch Lightning 2.6.6 on a 2-core machine of this
    kind): an MLP 32→64→64→1, MSE loss, SGD(lr=0.01), batch 32 per rank, ``--steps`` (default 500)
    steps per rank in one epoch, a synthetic TensorDataset split over the ranks by a
    DistributedSampler, ``torch.set_num_threads(1)`` in every process, the gloo backend. The configs:

    plain      a plain torch DDP loop (init_process_group, DistributedDataParallel, zero_grad,
               forward, loss, backward, step); this driver starts both processes itself, with
               RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, as torchrun would;
    ddp        ``torchplug.Trainer(accelerator="cpu", devices=2, strategy="ddp")``, lean (``logger=False,
               enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0``); the
               driver starts one process and the Trainer re-runs it for rank 1;
    ddp_spawn  the same Trainer with ``strategy="ddp_spawn"`` (the caller spawns two workers);
    lightning  Lightning's own ``Trainer(devices=2, strategy="ddp")``, only when ``lightning`` is
               importable by this interpreter (it is not installed for this benchmark).

    Each config runs as fresh processes, ``--repeats`` rounds interleaved (the order rotating from
    round to round) after one untimed warm-up round of 60 steps. Inside every rank, each training
    step (each loop iteration for plain, at the same point: before the forward) appends
    ``perf_counter()`` and ``thread_time()``; a run's ms/step is rank 0's steady state from batch
    50 to the last (the mean interval between those stamps; the ranks step in lock-step). The
    main thread's CPU time per step is printed beside it: it leaves out gloo's threads and the time
    other processes held the core, so it shows the framework's own work even on a busy machine. Also
    per run: the time from the driver's launch to rank 0's first step (wall clock, ``time.time()``
    on both sides) and to the end of rank 0's imports, ``fit()`` (for plain: from
    init_process_group to the end of the loop; for ddp it includes starting rank 1), and the total
    wall time from launch until every process has exited. Reported: the median over rounds.

    The target (issue 3, item 7) is ddp's steady ms/step at most 1.1x plain DDP's, judged on the
    ratio of the medians (the median of the per-round ratios is printed beside it). Lightning's
    figures from reference-figures.md are printed for comparison (4.9 ms/step against 2.9 for plain
    DDP there: 1.69x).

How to run it (from the repository root, with the dev venv)::

    python benchmarks/ddp.py
    python benchmarks/ddp.py --steps 500 --repeats 5 --configs plain,ddp,ddp_spawn --json

The machine's two cores are shared by both ranks (and by anything else running): expect noise of
±30% on single runs; compare medians. Exit status: 0 when ddp meets the target, 1 otherwise.
"""

from __future__ import annotations

import time

_STARTED = time.time()  # before any heavy import: a worker's import time counts from here

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from typing import Any, Final  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from _timing import add_json_option, write_json  # noqa: E402

_TORCH_IMPORTED = time.time()

STEADY_FROM: Final = 50
BATCH: Final = 32
WORLD: Final = 2
WARMUP_STEPS: Final = 60
TARGET_RATIO: Final = 1.1
LAUNCH_ENV: Final = "TORCHPLUG_BENCH_LAUNCHED_AT"
TAG: Final = "BENCH "

CONFIGS: Final = {
    "plain": "plain torch DDP loop, 2 processes started by the driver",
    "ddp": 'torchplug Trainer(devices=2, strategy="ddp"), lean',
    "ddp_spawn": 'torchplug Trainer(devices=2, strategy="ddp_spawn"), lean',
    "lightning": 'Lightning Trainer(devices=2, strategy="ddp"), lean (live)',
}

#: PyTorch Lightning 2.6.6 and plain DDP on a 2-core machine of this kind (reference-figures.md section 4).
LIGHTNING_REFERENCE: Final[dict[str, Any]] = {
    "source": "reference-figures.md section 4, 500 steps, 3 repeats",
    "lightning_ddp": {"steady_ms": 4.899, "fit_s": 5.96, "first_step_s": 6.54, "total_s": 10.15},
    "plain_ddp": {"steady_ms": 2.900, "fit_s": 1.46, "first_step_s": 3.33, "total_s": 5.97},
    "ratio": 4.899 / 2.900,
}


# -- what runs inside the ranks -------------------------------------------------------------------


def _report(**fields: Any) -> None:
    # One write per line: the ranks of a run share the pipe, and print() writes the newline separately.
    sys.stdout.write(TAG + json.dumps(fields) + "\n")
    sys.stdout.flush()


def _launched_at() -> float:
    return float(os.environ.get(LAUNCH_ENV, _STARTED))


def _dataset(steps: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH * WORLD, 32, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )


def _steady_ms(stamps: list[float]) -> float:
    return (stamps[-1] - stamps[STEADY_FROM]) / (len(stamps) - 1 - STEADY_FROM) * 1e3


def _step_report(rank: int, walls: list[float], cpus: list[float], first_step_at: float) -> None:
    _report(
        kind="rank",
        rank=rank,
        steps=len(walls),
        steady_ms=_steady_ms(walls),
        cpu_ms=_steady_ms(cpus),
        first_step_s=first_step_at - _launched_at(),
    )


def worker_plain(steps: int) -> None:
    """One rank of the plain DDP loop; ranks and rendezvous come from the environment."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    start = time.perf_counter()
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    data = _dataset(steps)
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, num_replicas=WORLD, rank=rank))
    model = DistributedDataParallel(_net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    walls: list[float] = []
    cpus: list[float] = []
    first = 0.0
    for x, y in loader:
        walls.append(time.perf_counter())
        cpus.append(time.thread_time())
        if len(walls) == 1:
            first = time.time()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    fit_s = time.perf_counter() - start
    _step_report(rank, walls, cpus, first)
    if rank == 0:
        _report(kind="main", fit_s=fit_s, import_s=_TORCH_IMPORTED - _launched_at())
    # Without it, a rank that tears gloo down while its peer still reads can abort the peer
    # ("terminate called without an active exception"), as the Trainer's teardown also avoids.
    dist.barrier()
    dist.destroy_process_group()


def _timed_model_class() -> type[Any]:
    """The torchplug model, created on first use: plain DDP workers never import torchplug.

    Every training_step appends the wall and CPU clocks; rank 0's figures are reported at the end.
    """
    cls = globals().get("TimedModel")
    if cls is not None:
        return cls  # type: ignore[no-any-return]
    import torchplug

    TimedModel = _timed_model_on(torchplug.Module)
    TimedModel.__qualname__ = "TimedModel"
    globals()["TimedModel"] = TimedModel
    return TimedModel


def _timed_model_on(base: type[Any]) -> type[Any]:
    """The benchmark's model on ``base`` (torchplug's or Lightning's module class), so both time the same step."""

    class TimedModel(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()
            self.walls: list[float] = []
            self.cpus: list[float] = []
            self.first = 0.0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.walls.append(time.perf_counter())
            self.cpus.append(time.thread_time())
            if batch_idx == 0:
                self.first = time.time()
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def on_train_end(self) -> None:
            _step_report(self.global_rank, self.walls, self.cpus, self.first)

    return TimedModel


def __getattr__(name: str) -> Any:
    """``ddp_spawn`` pickles the model by reference: its workers find the class here, by name."""
    if name == "TimedModel":
        return _timed_model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def worker_torchplug(steps: int, strategy: str) -> None:
    """Rank 0 of a torchplug run (the Trainer starts the other rank), or a rank re-run by the ``ddp`` launcher."""
    import torchplug

    model_class = _timed_model_class()
    imported = time.time()
    torch.set_num_threads(1)
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy=strategy,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    loader = DataLoader(_dataset(steps), batch_size=BATCH, shuffle=True)
    start = time.perf_counter()
    trainer.fit(model_class(), loader)
    fit_s = time.perf_counter() - start
    if trainer.global_rank == 0:  # rank 0, or the caller of spawned workers
        _report(kind="main", fit_s=fit_s, import_s=imported - _launched_at())


def worker_lightning(steps: int) -> None:
    """Lightning's DDP, for a live comparison (only when ``lightning`` is importable)."""
    import lightning.pytorch as pl  # type: ignore[import-not-found]

    imported = time.time()
    torch.set_num_threads(1)

    model_class = _timed_model_on(pl.LightningModule)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        enable_model_summary=False,
    )
    loader = DataLoader(_dataset(steps), batch_size=BATCH, shuffle=True)
    start = time.perf_counter()
    trainer.fit(model_class(), loader)
    fit_s = time.perf_counter() - start
    if trainer.global_rank == 0:
        _report(kind="main", fit_s=fit_s, import_s=imported - _launched_at())


# -- the driver ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_env() -> dict[str, str]:
    launcher_vars = (
        "LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "TORCHPLUG_PARENT_PID",
    )
    env = {k: v for k, v in os.environ.items() if k not in launcher_vars}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_config(config: str, steps: int, timeout: float) -> dict[str, Any]:
    """Run one config in fresh processes; return rank 0's figures and the total wall time."""
    me = [sys.executable, os.path.abspath(__file__), "--steps", str(steps)]
    env = _clean_env()
    launched = time.time()
    env[LAUNCH_ENV] = repr(launched)
    if config == "plain":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(WORLD))
        commands = [([*me, "--worker", "plain"], {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(WORLD)]
    elif config == "lightning":
        commands = [([*me, "--worker", "lightning"], env)]
    else:
        commands = [([*me, "--worker", "torchplug", "--strategy", config], env)]
    procs = [
        subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd, e in commands
    ]
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    total_s = time.time() - launched
    failed = [(proc.returncode, err) for proc, (_, err) in zip(procs, outputs) if proc.returncode]
    if failed:
        raise RuntimeError(f"{config} failed (exit code {failed[0][0]}):\n{failed[0][1][-3000:]}")
    reports = [json.loads(line[len(TAG) :]) for out, _ in outputs for line in out.splitlines() if line.startswith(TAG)]
    ranks = {r["rank"]: r for r in reports if r["kind"] == "rank"}
    main = next(r for r in reports if r["kind"] == "main")
    if sorted(ranks) != list(range(WORLD)) or {r["steps"] for r in ranks.values()} != {steps}:
        raise RuntimeError(f"{config}: unexpected reports {reports}")
    return {
        "steady_ms": ranks[0]["steady_ms"],
        "cpu_ms": ranks[0]["cpu_ms"],
        "first_step_s": ranks[0]["first_step_s"],
        "import_s": main["import_s"],
        "fit_s": main["fit_s"],
        "total_s": total_s,
    }


def measure(configs: list[str], steps: int, repeats: int, timeout: float) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {config: [] for config in configs}
    for config in configs:  # warm-up: file caches, compiled bytecode
        run_config(config, WARMUP_STEPS, timeout)
    for round_ in range(repeats):
        shift = round_ % len(configs)
        for config in configs[shift:] + configs[:shift]:
            runs[config].append(run_config(config, steps, timeout))
        done = ", ".join(f"{c} {r[-1]['steady_ms']:.2f}" for c, r in runs.items())
        print(f"  round {round_ + 1}/{repeats}: steady ms/step {done}", file=sys.stderr, flush=True)
    return runs


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for config, samples in runs.items():
        row: dict[str, Any] = {"description": CONFIGS[config]}
        for key in samples[0]:
            row[key] = statistics.median(s[key] for s in samples)
        row["steady_ms_all"] = [round(s["steady_ms"], 3) for s in samples]
        if config != "plain" and "plain" in runs:
            row["ratio"] = row["steady_ms"] / rows["plain"]["steady_ms"]
            row["paired_ratio"] = statistics.median(
                s["steady_ms"] / p["steady_ms"] for s, p in zip(samples, runs["plain"])
            )
            row["cpu_ratio"] = row["cpu_ms"] / rows["plain"]["cpu_ms"]
        rows[config] = row
    return rows


def print_report(rows: dict[str, Any], args: argparse.Namespace, notes: list[str]) -> None:
    print(
        f"DDP on the CPU (gloo), {WORLD} processes: {args.steps} steps per rank, batch {BATCH} per rank, "
        f"{args.repeats} interleaved rounds after one warm-up; torch {torch.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, 1 thread per process"
    )
    print()
    print(
        f"{'config':<10} {'steady ms/step':>14} {'cpu ms/step':>11} {'vs plain':>9} {'launch→imports':>14} "
        f"{'launch→1st step':>15} {'fit()':>7} {'total':>7}"
    )
    for config, row in rows.items():
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "–"
        print(
            f"{config:<10} {row['steady_ms']:14.3f} {row['cpu_ms']:11.3f} {ratio:>9} {row['import_s']:13.2f}s "
            f"{row['first_step_s']:14.2f}s {row['fit_s']:6.2f}s {row['total_s']:6.2f}s"
        )
    print("  medians over rounds; steady: rank 0 from batch 50 (wall clock); cpu: rank 0's main-thread CPU time")
    print("  per step (thread_time: the work of the step itself, without gloo's threads nor the time other")
    print("  processes held the core); fit(): plain = init_process_group to the end of the loop, ddp = the whole")
    print("  trainer.fit() on rank 0 (starting rank 1 included), ddp_spawn = fit() in the caller.")
    for config, row in rows.items():
        print(f"  {config} steady ms/step per round: {', '.join(f'{v:.2f}' for v in row['steady_ms_all'])}")
    for note in notes:
        print(f"  note: {note}")
    print()
    if "ddp" in rows and "ratio" in rows["ddp"]:
        row = rows["ddp"]
        verdict = "PASS" if row["ratio"] <= TARGET_RATIO else "FAIL"
        print(
            f"torchplug ddp / plain DDP, steady ms/step: {row['ratio']:.2f}x (median of per-round ratios "
            f"{row['paired_ratio']:.2f}x); target ≤ {TARGET_RATIO}x: {verdict}"
        )
        print(
            f"  rank 0's main-thread CPU per step: {row['cpu_ms']:.3f} ms against {rows['plain']['cpu_ms']:.3f} "
            f"({row['cpu_ratio']:.2f}x): the framework's own work, which the wall clock amplifies on a busy host"
        )
        print("  (the ranks share 2 cores with whatever else runs: extra CPU on one rank delays its peer too).")
    ref = LIGHTNING_REFERENCE
    lit, raw = ref["lightning_ddp"], ref["plain_ddp"]
    print(
        f"Lightning 2.6.6 reference ({ref['source']}): {lit['steady_ms']:.2f} ms/step against "
        f"{raw['steady_ms']:.2f} for plain DDP ({ref['ratio']:.2f}x); launch→first step {lit['first_step_s']:.2f} s "
        f"against {raw['first_step_s']:.2f} s; fit() {lit['fit_s']:.2f} s; total {lit['total_s']:.2f} s against "
        f"{raw['total_s']:.2f} s."
    )
    if "ddp" in rows and "plain" in rows:
        ours, plain = rows["ddp"], rows["plain"]
        print(
            f"  ours: {ours['steady_ms']:.2f} ms/step against {plain['steady_ms']:.2f} ({ours['ratio']:.2f}x); "
            f"launch→first step {ours['first_step_s']:.2f} s against {plain['first_step_s']:.2f} s "
            f"({ours['first_step_s'] - plain['first_step_s']:+.2f} s; Lightning "
            f"{lit['first_step_s'] - raw['first_step_s']:+.2f} s); total {ours['total_s']:.2f} s against "
            f"{plain['total_s']:.2f} s."
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=500, help="training steps per rank (one epoch)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds of every config")
    parser.add_argument(
        "--configs",
        default="plain,ddp,ddp_spawn,lightning",
        help="comma-separated subset of: " + ", ".join(CONFIGS) + " (plain is always run)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    add_json_option(parser)
    parser.add_argument("--worker", choices=("plain", "torchplug", "lightning"), help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps <= STEADY_FROM + 1 or args.repeats < 1:
        parser.error(f"--steps must be more than {STEADY_FROM + 1} and --repeats at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "plain":
        worker_plain(args.steps)
        return 0
    if args.worker == "torchplug":
        worker_torchplug(args.steps, args.strategy)
        return 0
    if args.worker == "lightning":
        worker_lightning(args.steps)
        return 0
    requested = ["plain", *(c for c in args.configs.split(",") if c and c != "plain")]
    unknown = [c for c in requested if c not in CONFIGS]
    if unknown:
        print(f"Unknown config(s) {', '.join(unknown)}. Choose from {', '.join(CONFIGS)}.", file=sys.stderr)
        return 2
    notes = []
    if "lightning" in requested and importlib.util.find_spec("lightning") is None:
        requested.remove("lightning")
        notes.append("lightning: skipped, not importable by this interpreter (its reference figures are below)")
    rows = summarise(measure(requested, args.steps, args.repeats, args.timeout))
    if args.json:
        write_json(
            {
                "steps": args.steps,
                "repeats": args.repeats,
                "python": platform.python_version(),
                "configs": rows,
                "target_ratio": TARGET_RATIO,
                "notes": notes,
                "lightning_reference": LIGHTNING_REFERENCE,
            },
            args.json,
        )
    if args.json != "-":
        print_report(rows, args, notes)
    return 0 if "ddp" in rows and rows["ddp"].get("ratio", float("inf")) <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
