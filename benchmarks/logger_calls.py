"""Per-step cost of each logger, counted rather than timed: Python calls and host syncs per training step.

What is measured:
    The model and data of ``step_overhead.py`` (MLP 32→64→64→1, batch 32, SGD) with the Trainer's
    defaults plus ``self.log("train_loss", loss, prog_bar=True)`` in every step (its variant D), with
    ``logger=`` each of: the default (None), and each name given. The fit runs under ``cProfile``
    twice, for ``--short`` and ``--long`` steps, after a warm-up fit of 120 steps (imports and
    first-use costs of each tracker, at a logging step); the difference
    divided by the difference in steps is the steady per-step count, free of set-up costs:

    - ``calls_per_step``: Python function calls (the interpreter's work, independent of the load of
      a shared machine, unlike wall time);
    - ``syncs_per_step``: calls that wait for a tensor's value on the host (``Tensor.item``,
      ``__float__``, ``cpu``, ``tolist``, ``numpy``, ``__bool__``, ``__int__``), counted by a
      ``TorchFunctionMode`` in a fit of its own (so ``float(tensor)`` counts too). Logging must add
      none per step beyond what the user asked for: with ``log_every_n_steps=50``, one every 50
      steps (0.02) is the values being sent to the loggers.

How to run it (from the repository root, with the dev venv)::

    python benchmarks/logger_calls.py                        # the default logger and csv
    MLFLOW_TRACKING_URI=sqlite:////tmp/b.db WANDB_MODE=offline \\
        python benchmarks/logger_calls.py --loggers csv,tensorboard,mlflow,wandb --json

Exit status: 1 when a logger adds host syncs per step beyond the default logger's, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import sys
import tempfile
from typing import Any, Final

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from _timing import add_json_option, write_json

#: Tensor methods that wait for the value on the host.
SYNCS: Final = ("item", "__float__", "cpu", "tolist", "numpy", "__bool__", "__int__")


class Net(torchplug.Module):
    """The benchmark's MLP, logging its loss on every step (to the progress bar too)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _SyncCounter(TorchFunctionMode):
    """Counts the tensor calls that wait for a value on the host (``float(t)`` included)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in SYNCS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def profile_fit(logger: str | None, steps: int) -> tuple[str, int, int]:
    """(logger class, Python calls, host syncs) of one fit of ``steps`` steps."""
    torch.manual_seed(0)
    x = torch.randn(32 * steps, 32)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=32)
    with tempfile.TemporaryDirectory() as root, contextlib.redirect_stdout(io.StringIO()):
        trainer = torchplug.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=root, logger=logger)
        name = type(trainer.logger).__name__
        profile = cProfile.Profile()
        with _SyncCounter() as syncs:  # a separate fit: the counter's own calls stay out of the profile
            trainer.fit(Net(), loader)
        trainer = torchplug.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=root, logger=logger)
        profile.enable()
        trainer.fit(Net(), loader)
        profile.disable()
    stats: Any = pstats.Stats(profile)
    return name, stats.total_calls, syncs.count


def measure(logger: str | None, short: int, long: int) -> dict[str, Any]:
    """The steady per-step counts of ``logger`` (see the module docstring)."""
    profile_fit(logger, 120)  # imports and first-use costs, a logging step (every 50) included
    name, calls_a, syncs_a = profile_fit(logger, short)
    _, calls_b, syncs_b = profile_fit(logger, long)
    span = long - short
    return {
        "logger": logger or "(default)",
        "class": name,
        "calls_per_step": round((calls_b - calls_a) / span, 3),
        "syncs_per_step": round((syncs_b - syncs_a) / span, 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loggers", default="csv", help="comma-separated registry names, besides the default")
    parser.add_argument("--short", type=int, default=300, help="steps of the shorter fit")
    parser.add_argument("--long", type=int, default=1300, help="steps of the longer fit")
    add_json_option(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    names: list[str | None] = [None, *[n for n in args.loggers.split(",") if n]]
    rows = [measure(name, args.short, args.long) for name in names]
    if args.json:
        write_json(rows, args.json)
    if args.json != "-":
        print(f"{'logger':<14} {'class':<20} {'calls/step':>10} {'syncs/step':>10}")
        for row in rows:
            print(f"{row['logger']:<14} {row['class']:<20} {row['calls_per_step']:>10} {row['syncs_per_step']:>10}")
    baseline = rows[0]["syncs_per_step"]
    return 1 if any(row["syncs_per_step"] > baseline for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
