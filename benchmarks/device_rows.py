"""The GPU rows of the benchmarks, on one CUDA device: each Trainer case against its raw PyTorch loop, in one process.

What is measured (``--steps`` steps each, after ``--warmup`` untimed ones, the device synchronised
before the first and after the last timed step; ``--repeats`` rounds, interleaved, median):

    bf16-mixed  raw loop under ``torch.autocast("cuda", torch.bfloat16)`` against
                ``Trainer(accelerator="cuda", devices=1, precision="bf16-mixed")``, lean;
    16-mixed    raw loop under ``torch.autocast("cuda", torch.float16)`` with a
                ``torch.amp.GradScaler`` (loss scaling) against ``precision="16-mixed"``;
    fsdp        ``Trainer(strategy="fsdp", devices=1)`` against the same raw loop in 32-bit;
    async save  ``AsyncCheckpointIO``: the time the caller is blocked by a save of a 50M-parameter
                model held on the GPU (copies into reused pinned host buffers), against a
                synchronous ``TorchCheckpointIO`` save of the same checkpoint.

The rows are µs/step (or seconds per save) and the ratio to the raw case. The model is the
step-overhead benchmark's MLP widened to 1024 (so that the GPU has work), batch 256.

How to run it (one CUDA GPU; ``benchmarks/device_check.sh`` runs it with the GPU tests)::

    python benchmarks/device_rows.py
    python benchmarks/device_rows.py --rows bf16-mixed,async-save --json rows.json
    python benchmarks/device_rows.py --dry-run      # check the arguments and print the plan; no GPU needed

Exit status: 0 when every row ran, 2 when there is no CUDA device (or an argument is wrong).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from _timing import add_json_option, write_json

ROWS: Final = ("bf16-mixed", "16-mixed", "fsdp", "async-save")
WIDTH: Final = 1024
BATCH: Final = 256


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of: " + ", ".join(ROWS))
    parser.add_argument("--steps", type=int, default=300, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps before them")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--dry-run", action="store_true", help="check the arguments, print the plan, need no GPU")
    add_json_option(parser)
    args = parser.parse_args(argv)
    args.row_list = [r for r in args.rows.split(",") if r]
    unknown = [r for r in args.row_list if r not in ROWS]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        parser.error(f"--steps and --repeats must be at least 1 and --warmup at least 0; got {args.steps}, "
                     f"{args.repeats}, {args.warmup}")  # fmt: skip
    return args


# -- the cases ------------------------------------------------------------------------------------


def _net() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 1),
    )  # fmt: skip


def _loader(count: int) -> Any:
    """``count`` batches in host memory, read through a DataLoader: both sides move each batch to the GPU."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(count * BATCH, 32, generator=generator), torch.randn(count * BATCH, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH)


def raw_loop(precision: str, steps: int, warmup: int) -> float:
    """µs/step of the plain loop in ``precision`` ("32-true", "bf16-mixed", "16-mixed" with a GradScaler)."""
    import torch

    device = torch.device("cuda", 0)
    model = _net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" else None
    start = 0.0
    for index, (x_host, y_host) in enumerate(_loader(warmup + steps)):
        x, y = x_host.to(device), y_host.to(device)
        if index == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def trainer_loop(precision: str, strategy: str, steps: int, warmup: int) -> float:
    """µs/step of the lean Trainer on one CUDA device, timed from inside training_step (device synchronised)."""
    import torch

    import torchplug

    stamps: list[float] = []

    class Net(torchplug.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx in (warmup, warmup + steps - 1):
                torch.cuda.synchronize()
                stamps.append(time.perf_counter())
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x).float(), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = torchplug.Trainer(
        accelerator="cuda", devices=1, strategy=strategy, precision=precision, max_epochs=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Net(), _loader(warmup + steps))
    # The stamps bracket steps - 1 steps (from the start of the first timed step to the start of the last).
    return (stamps[1] - stamps[0]) / max(1, steps - 1) * 1e6 if len(stamps) == 2 else float("nan")


def async_save(repeats: int) -> dict[str, float]:
    """Seconds the caller is blocked by an async save of a model on the GPU, and a synchronous save's."""
    import torch

    from torchplug.io import AsyncCheckpointIO, TorchCheckpointIO

    with torch.no_grad():
        model = torch.nn.Sequential(*(torch.nn.Linear(4096, 4096) for _ in range(3))).to("cuda")
    checkpoint = {"state_dict": model.state_dict(), "epoch": 1, "global_step": 10}
    sync_io, async_io = TorchCheckpointIO(), AsyncCheckpointIO(TorchCheckpointIO())
    blocked, sync = [], []
    with tempfile.TemporaryDirectory(prefix="torchplug-device-") as tmp:
        async_io.save_checkpoint(checkpoint, str(Path(tmp) / "warm.ckpt"))  # allocates the pinned buffers
        async_io.flush()
        for _ in range(repeats):
            start = time.perf_counter()
            async_io.save_checkpoint(checkpoint, str(Path(tmp) / "async.ckpt"))
            blocked.append(time.perf_counter() - start)
            async_io.flush()
            start = time.perf_counter()
            sync_io.save_checkpoint(checkpoint, str(Path(tmp) / "sync.ckpt"))
            sync.append(time.perf_counter() - start)
        async_io.teardown()
    return {"blocked_s": statistics.median(blocked), "sync_s": statistics.median(sync)}


def plan(rows: list[str]) -> dict[str, tuple[Callable[[int, int], float], Callable[[int, int], float]]]:
    """Each step row's (raw, Trainer) pair of measurements."""
    cases = {
        "bf16-mixed": ("bf16-mixed", "auto"),
        "16-mixed": ("16-mixed", "auto"),
        "fsdp": ("32-true", "fsdp"),
    }
    out = {}
    for row in rows:
        if row in cases:
            precision, strategy = cases[row]
            out[row] = (
                lambda s, w, p=precision: raw_loop(p, s, w),
                lambda s, w, p=precision, st=strategy: trainer_loop(p, st, s, w),
            )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steps = plan(args.row_list)
    if args.dry_run:
        print(f"device_rows: would run {', '.join(args.row_list)}: {args.steps} steps after {args.warmup}, "
              f"{args.repeats} rounds; no GPU used (--dry-run)")  # fmt: skip
        return 0
    import torch

    if not torch.cuda.is_available():
        print(
            "device_rows: no CUDA device (torch.cuda.is_available() is False, torch "
            f"{torch.__version__}). Run it on a machine with one NVIDIA GPU, or use --dry-run.",
            file=sys.stderr,
        )
        return 2
    results: dict[str, dict[str, float]] = {}
    samples: dict[str, tuple[list[float], list[float]]] = {row: ([], []) for row in steps}
    for round_ in range(args.repeats):
        order = list(steps)[round_ % max(1, len(steps)) :] + list(steps)[: round_ % max(1, len(steps))]
        for row in order:
            raw, ours = steps[row]
            samples[row][0].append(raw(args.steps, args.warmup))
            samples[row][1].append(ours(args.steps, args.warmup))
    for row, (raw_us, ours_us) in samples.items():
        raw_median, ours_median = statistics.median(raw_us), statistics.median(ours_us)
        results[row] = {"raw_us": raw_median, "trainer_us": ours_median, "ratio": ours_median / raw_median}
    if "async-save" in args.row_list:
        saved = async_save(args.repeats)
        results["async-save"] = {**saved, "ratio": saved["blocked_s"] / saved["sync_s"]}
    print(f"GPU rows on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.repeats} rounds")
    print(f"{'row':<12} {'raw':>12} {'torchplug':>12} {'ratio':>7}")
    for row, r in results.items():
        if row == "async-save":
            print(f"{row:<12} {r['sync_s']:11.3f}s {r['blocked_s']:11.3f}s {r['ratio']:6.1%}  (blocked / sync save)")
        else:
            print(f"{row:<12} {r['raw_us']:10.1f}µs {r['trainer_us']:10.1f}µs {r['ratio']:6.2f}x")
    if args.json:
        write_json({"device": torch.cuda.get_device_name(0), "rows": results,
                    "ratios": {k: v["ratio"] for k, v in results.items()}}, args.json)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
