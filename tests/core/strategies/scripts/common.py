"""What the distributed test scripts share: the model, the data, and callbacks that record each rank's view.

The scripts run as real processes (re-run by the ``ddp`` launcher, spawned, forked, or started by
``torchrun``), so everything a test checks is written to files under an output directory:

* ``constructed_<pid>.json`` by every process that built the Trainer (the ranks it reports then);
* ``started_rank<R>.json`` when rank R has joined the process group (its pid, parent pid and ranks);
* ``rank<R>.json`` and ``rank<R>.pt`` at the end of fit (ranks, steps, metrics, weights and their hash);
* ``main_<pid>.json`` by the code after ``trainer.fit`` in each process that reaches it (for spawn
  and fork that is the caller only, whose model must hold the trained weights).

The test process imports this module too (``tests.core.strategies.scripts.common``) to build the
same model and data for its reference computation.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import torchplug
from torchplug.callbacks.callback import Callback
from torchplug.io.torch_io import TorchCheckpointIO

SEED = 1234
IN, HIDDEN = 32, 64


def dataset(n: int = 64, seed: int = 7) -> TensorDataset:
    """A fixed regression problem: ``n`` samples of 32 features and one target."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=generator)
    w = torch.randn(IN, 1, generator=generator)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


def loader(n: int = 64, batch_size: int = 8, shuffle: bool = True) -> DataLoader[Any]:
    """A plain DataLoader over :func:`dataset` (the Trainer adds the DistributedSampler)."""
    return DataLoader(dataset(n), batch_size=batch_size, shuffle=shuffle)


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """:func:`dataset` as a stream; ``sharded``: each process reads every world_size-th sample from its rank."""

    def __init__(self, n: int, sharded: bool) -> None:
        self.data, self.sharded = dataset(n), sharded

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        start, step = 0, 1
        if self.sharded and dist.is_available() and dist.is_initialized():
            start, step = dist.get_rank(), dist.get_world_size()
        for index in range(start, len(self.data), step):
            yield self.data[index]


def stream_loader(n: int = 64, batch_size: int = 8, sharded: bool = False) -> DataLoader[Any]:
    """A DataLoader over :class:`Stream` (no sampler: the Trainer cannot shard it)."""
    return DataLoader(Stream(n, sharded), batch_size=batch_size)


def mlp(unused: bool = False) -> torch.nn.Module:
    """The MLP 32-64-64-1 the tests train (built after ``torch.manual_seed(SEED)`` for fixed weights)."""
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 1),
    )


class Regressor(torchplug.Module):
    """The MLP with MSE loss and SGD with momentum.

    Args:
        lr: Learning rate.
        unused: Add a layer that never takes part in the loss (needs ``find_unused_parameters``).
        crash_rank: The global rank whose ``training_step`` raises (-1: none).
        crash_step: The global step at which it raises.
        crash_how: ``"raise"`` an error, or ``"kill"`` the process with SIGKILL (no clean-up at all).
        stall_rank: The global rank whose ``training_step`` at ``crash_step`` sleeps for an hour,
            outside any collective (so it cannot notice that a peer has gone), -1: none.
        log_sync: Also log ``rank_synced`` (with ``sync_dist=True``) and ``rank_local`` (without).
        dropout: Drop this fraction of the inputs in training (so the result depends on the random state).
        optimizer: ``"sgd"`` (with momentum) or ``"adam"`` (whose state holds a step count too).
    """

    def __init__(
        self,
        lr: float = 0.05,
        unused: bool = False,
        crash_rank: int = -1,
        crash_step: int = -1,
        crash_how: str = "raise",
        stall_rank: int = -1,
        log_sync: bool = False,
        dropout: float = 0.0,
        optimizer: str = "sgd",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(SEED)
        self.net = mlp()
        self.extra = torch.nn.Linear(HIDDEN, 1) if unused else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hparams.dropout:
            x = torch.nn.functional.dropout(x, self.hparams.dropout, training=self.training)
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        rank = self.global_rank
        if rank == self.hparams.stall_rank and self.global_step == self.hparams.crash_step:
            time.sleep(3600)
        if rank == self.hparams.crash_rank and self.global_step == self.hparams.crash_step:
            if self.hparams.crash_how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"rank {rank} fails on purpose at step {self.global_step}")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        if self.hparams.log_sync:
            value = torch.tensor(float(rank) + 10.0 * self.global_step)
            self.log("rank_synced", value, sync_dist=True, on_step=True, on_epoch=True)
            self.log("rank_local", value, on_step=True, on_epoch=True)
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.get("optimizer", "sgd") == "adam":
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr / 10)
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class ManualRegressor(Regressor):
    """The Regressor with manual optimization: the same steps, written out as a user of manual optimization would.

    ``clip``: clip the gradients' norm to this value with ``self.clip_gradients`` before each step.
    """

    def __init__(self, clip: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.automatic_optimization = False
        self.clip = clip

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        optimizer.zero_grad()
        self.manual_backward(loss)
        if self.clip is not None:
            self.clip_gradients(optimizer, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
        optimizer.step()
        self.log("train_loss", loss)
        return loss


def state_hash(state: dict[str, torch.Tensor]) -> str:
    """A hash of the exact bytes of every tensor, in key order."""
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        value = state[key].detach().cpu().contiguous()
        if value.dtype is torch.bfloat16:  # numpy has no bfloat16: hash the same bytes as int16
            value = value.view(torch.int16)
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def ranks_of(trainer: Any) -> dict[str, Any]:
    """What a process knows about its place in the run."""
    environment = trainer.cluster_environment
    return {
        "global_rank": trainer.global_rank,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "num_nodes": trainer.num_nodes,
        "world_size": trainer.world_size,
        "environment": type(environment).__name__,
        "strategy": repr(trainer.strategy),
        "pid": os.getpid(),
        "ppid": os.getppid(),
    }


class Recorder(Callback):
    """Writes ``started_rank<R>.json`` at setup and ``rank<R>.json``/``.pt`` at the end of fit.

    Args:
        out: The output directory.
        full_state: Gather the full state dict through the strategy (sharded strategies; a
            collective, so every rank calls it) instead of reading the local module.
    """

    def __init__(self, out: str, full_state: bool = False) -> None:
        self.out = Path(out)
        self.full_state = full_state
        self.batches_run = 0

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches_run += 1

    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        write_json(self.out / f"started_rank{trainer.global_rank}.json", ranks_of(trainer))

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        rank = trainer.global_rank
        if self.full_state:
            state = trainer.strategy.module_state_dict()
        else:
            state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        if any(hasattr(v, "full_tensor") for v in state.values()):
            # A sharded state dict (FSDP, state_dict_type="sharded") holds DTensors: gathered here, on every
            # rank, and kept on rank 0 only, as a full state dict is.
            state = {k: v.full_tensor().cpu() if hasattr(v, "full_tensor") else v for k, v in state.items()}
            if self.full_state and rank != 0:
                state = {}
        record = {
            **ranks_of(trainer),
            "ckpt_path": trainer.ckpt_path,
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "batches_run": self.batches_run,
            "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "logged_metrics": trainer.logged_metrics,
            "hash": state_hash(state) if state else None,
            "describe": trainer.describe(),
        }
        if state:
            torch.save(state, self.out / f"rank{rank}.pt")
        write_json(self.out / f"rank{rank}.json", record)


class RankRandomness(Callback):
    """Sets each rank's random state apart at the start of a fresh fit (a resumed fit gets its own back)."""

    def on_train_start(self, trainer: Any, module: Any) -> None:
        if trainer.global_step == 0:
            torch.rand(trainer.global_rank + 1)


class RestoredRecorder(Callback):
    """At the first batch of fit, records what was restored: ``restored_rank<R>.pt`` (rank 0: model, optimizers).

    Rank 0's file holds the whole model and every optimizer's whole state (keyed by parameter
    name), gathered from the shards; every rank's holds its random state at that point.
    """

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.done = False

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if self.done:
            return
        self.done = True
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        rng = torch.get_rng_state()
        model = module  # the user's module: its parameter names, whatever wraps it
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
        optimizers = [get_optimizer_state_dict(model, o, options=options) for o in trainer.optimizers]
        record: dict[str, Any] = {"rng": rng, "global_step": trainer.global_step}
        if trainer.global_rank == 0:
            record.update(state_dict=weights, optimizer_states=optimizers)
        torch.save(record, self.out / f"restored_rank{trainer.global_rank}.pt")


class CountingCheckpointIO(TorchCheckpointIO):
    """The torch checkpoint IO, appending ``<pid> <path>`` to a log file for every checkpoint written."""

    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.log_path = log_path

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        with open(self.log_path, "a") as log:
            log.write(f"{os.getpid()} {path}\n")


def write_main(out: str, trainer: Any, module: torch.nn.Module) -> None:
    """Record, after ``trainer.fit`` returned, what this process's model holds.

    After FSDP the parameters are still sharded (DTensors): they are gathered here, so every rank
    must call this.
    """
    state = {}
    for key, value in sorted(module.state_dict().items()):
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        state[key] = value.detach().cpu()
    write_json(
        Path(out) / f"main_{os.getpid()}.json",
        {
            "pid": os.getpid(),
            "launched_by_us": "TORCHPLUG_PARENT_PID" in os.environ,
            "global_step": trainer.global_step,
            "hash": state_hash(state),
            "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "checkpoint_dirpath": getattr(trainer.checkpoint_callback, "dirpath", None),
            "last_model_path": getattr(trainer.checkpoint_callback, "last_model_path", None),
            "best_model_path": getattr(trainer.checkpoint_callback, "best_model_path", None),
        },
    )


def write_error(out: str, exc: BaseException) -> None:
    """Record the error ``trainer.fit`` raised in this process."""
    write_json(
        Path(out) / f"error_{os.getpid()}.json",
        {
            "pid": os.getpid(),
            "type": type(exc).__name__,
            "message": str(exc),
            "error_index": getattr(exc, "error_index", None),
            "cause": type(exc.__cause__).__name__ if exc.__cause__ is not None else None,
        },
    )
