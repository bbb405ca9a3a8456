"""The tiny model, data and Trainer runs the training checks use (this module imports torch).

Every run is short (a few optimizer steps of a two-layer regression) and deterministic: the model
is built from seed 0 and the run's own random stream (shuffling, dropout) starts from seed 1234,
so an interrupted run resumed from its checkpoint must end with exactly the weights of an
uninterrupted one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug.callbacks.callback import Callback

__all__ = [
    "ConformanceModel",
    "RunResult",
    "SaveAndStop",
    "collectives_record",
    "loader",
    "run_fit",
    "serializable",
]

#: Samples and batch size of the training data: 8 optimizer steps per epoch.
SAMPLES = 64
BATCH_SIZE = 8


def dataset(n: int = SAMPLES) -> TensorDataset:
    """``y = x @ w + noise`` with 4 features, always the same."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=generator))


def loader(shuffle: bool = True) -> DataLoader[Any]:
    """The training data, shuffled by torch's global random stream (restored on resume)."""
    return DataLoader(dataset(), batch_size=BATCH_SIZE, shuffle=shuffle)


class ConformanceModel(torchplug.Module):
    """Linear, ReLU, dropout, linear; SGD with momentum (so the optimizer has state to save).

    Records, per training batch, the loss, and where the batch arrived when the weights are elsewhere.
    """

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)
            )
        self.losses: list[float] = []
        #: ``"<batch device> (weights on <device>)"`` for every batch that did not meet the weights.
        self.misplaced: set[str] = set()
        self.root_device = ""
        self.record_collectives: dict[str, Any] | None = None
        #: Where each process writes its record at the end of the fit (``rank-<global rank>.json``), if set.
        self.record_dir: Path | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        weights = next(self.parameters()).device
        if x.device != weights:
            self.misplaced.add(f"{x.device} (weights on {weights})")
        loss = torch.nn.functional.mse_loss(self(x).float(), y.float())
        self.losses.append(float(loss.detach()))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)

    def on_fit_start(self) -> None:
        # Asked here, in the process that trains: a launching strategy knows its device only there.
        self.root_device = str(self.trainer.strategy.root_device)

    def on_fit_end(self) -> None:
        strategy = self.trainer.strategy
        if self.record_collectives is not None:
            self.record_collectives.update(collectives_record(strategy))
        if self.record_dir is not None:
            write_json(self.record_dir / f"rank-{strategy.global_rank}.json", self.record())

    def record(self) -> dict[str, Any]:
        """What this process ended the fit with, for the parent to compare across ranks."""
        strategy = self.trainer.strategy
        return {
            "rank": strategy.global_rank,
            "world_size": strategy.world_size,
            "global_step": self.trainer.global_step,
            "losses": self.losses,
            "weights": {k: v.detach().cpu() for k, v in self.state_dict().items()},
            "misplaced": sorted(self.misplaced),
            "root_device": self.root_device,
            "strategy": type(strategy).__name__,
            "collectives": self.record_collectives,
        }


def collectives_record(strategy: Any) -> dict[str, Any]:
    """What the strategy's collectives return in this process (compared across processes by the checks)."""
    rank, world = int(strategy.global_rank), int(strategy.world_size)
    device = strategy.root_device
    strategy.barrier("torchplug-conformance")
    gathered = strategy.all_gather(torch.tensor([float(rank), 1.0], device=device))
    return {
        "rank": rank,
        "world_size": world,
        "is_global_zero": bool(strategy.is_global_zero),
        "broadcast": strategy.broadcast({"from": rank, "pad": "x" * (1 + 7 * rank)}, src=world - 1),
        "all_gather_shape": list(gathered.shape),
        "all_gather": gathered.cpu().tolist(),
        "reduce_sum": float(strategy.reduce(torch.tensor(float(rank + 1), device=device), reduce_op="sum")),
        "reduce_mean": float(strategy.reduce(torch.tensor(float(rank + 1), device=device), reduce_op="mean")),
        "reduce_max": float(strategy.reduce(torch.tensor(float(rank + 1), device=device), reduce_op="max")),
        "any": bool(strategy.reduce_boolean_decision(rank == world - 1, all=False)),
        "all": bool(strategy.reduce_boolean_decision(rank == world - 1, all=True)),
    }


class SaveAndStop(Callback):
    """Writes a checkpoint after optimizer step ``step``, then stops the run (as a crash would, in every process)."""

    def __init__(self, path: str, step: int) -> None:
        self.path, self.step = path, step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step and not trainer.should_stop:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


@dataclass
class RunResult:
    """What one run ended with."""

    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    global_step: int = 0
    misplaced: set[str] = field(default_factory=set)
    root_device: str = ""
    describe: str = ""
    collectives: dict[str, Any] | None = None
    trainer: Any = None


def quiet(root: Path, **kwargs: Any) -> dict[str, Any]:
    """Trainer arguments for a short silent run under ``root``."""
    return {
        "default_root_dir": str(root),
        "logger": False,
        "enable_progress_bar": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "max_epochs": 2,
        "log_every_n_steps": 1,  # a run of a few steps: the default 50 warns, and would log nothing
        **kwargs,
    }


def run_fit(
    root: Path,
    *,
    crash_at: int | None = None,
    ckpt_path: str | None = None,
    collectives: bool = False,
    record_dir: Path | None = None,
    **arguments: Any,
) -> RunResult:
    """Train the conformance model with ``Trainer(**arguments)``.

    With ``crash_at``, the run writes ``root/interrupted.ckpt`` after that optimizer step and
    stops there. With ``collectives``, the strategy's collectives are exercised at the end of
    the fit (:func:`collectives_record`). With ``record_dir``, every process that trains writes its
    record there. The weights are returned on the CPU, keyed by name.
    """
    model = ConformanceModel()
    model.record_collectives = {} if collectives else None
    model.record_dir = record_dir
    # The run's own random stream; torch.manual_seed rather than seed_everything, which would
    # export the seed to every process this one starts afterwards.
    torch.manual_seed(1234)
    callbacks = [SaveAndStop(str(root / "interrupted.ckpt"), crash_at)] if crash_at else []
    trainer = torchplug.Trainer(**quiet(root, callbacks=callbacks, **arguments))
    result = RunResult(describe=trainer.describe(), trainer=trainer)
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    result.weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    result.losses = list(model.losses)
    result.global_step = trainer.global_step
    result.misplaced = set(model.misplaced)
    result.root_device = model.root_device
    result.collectives = model.record_collectives
    return result


def finite(result: RunResult) -> bool:
    """Whether every loss and weight of the run is finite."""
    return all(math.isfinite(v) for v in result.losses) and all(
        bool(torch.isfinite(w.float()).all()) for w in result.weights.values() if w.is_floating_point()
    )


def mismatched(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> list[str]:
    """The names of the tensors that are not bit-for-bit equal (or missing on one side)."""
    names = sorted(set(left) | set(right))
    return [n for n in names if n not in left or n not in right or not torch.equal(left[n], right[n])]


def serializable(value: Any) -> Any:
    """``value`` as JSON-ready data (tensors as lists), for the records worker processes write."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {str(k): serializable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [serializable(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON, atomically (the reader may poll for it)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(serializable(data)))
    partial.replace(path)


def flat_weights(weights: dict[str, torch.Tensor]) -> Iterator[float]:
    """Every weight as a float, in parameter order."""
    for tensor in weights.values():
        yield from (float(v) for v in tensor.detach().float().flatten())
