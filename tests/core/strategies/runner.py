"""Running the distributed test scripts as real processes, with a time limit, and reading what they recorded.

Every run starts in a new session, so that whatever it starts (re-run ranks, spawned workers,
torchrun's agent and workers) can be found afterwards: :func:`run` reports the processes of the
session still alive when the command has ended, and kills them, so no test leaves any behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DistributedSampler

from tests.core.strategies.scripts import common

SCRIPTS = Path(__file__).parent / "scripts"
TRAIN = SCRIPTS / "train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")

#: Generous: the machine has two cores shared with other test runs, and each process imports torch.
TIMEOUT = 300.0

#: These tests find the processes a run left through /proc, and the ``ddp_fork`` launcher forks.
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes (Linux only)"
)

#: Variables of an enclosing launcher or scheduler that would change how the scripts start.
_FOREIGN = (
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
    "TORCHPLUG_CLUSTER_ENVIRONMENT",
    "SLURM_JOB_ID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "LSB_JOBID",
    "TORCHPLUG_GLOBAL_SEED",
    "TORCHPLUG_SEED_WORKERS",
)


@dataclass
class Run:
    """A finished command: its exit code, combined output, wall time and the processes it left."""

    returncode: int
    output: str
    elapsed: float
    leftovers: list[int]

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any launcher's variables, one thread per process, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN and not k.startswith("TORCHELASTIC_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(Path(__file__).parents[3]))
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    command: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session, its output (stdout and stderr) going to ``log``."""
    with open(log, "wb") as sink:
        return subprocess.Popen(
            list(command),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env or environment(),
            start_new_session=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        )


def finish(
    proc: subprocess.Popen[bytes],
    log: Path,
    timeout: float = TIMEOUT,
    started: float | None = None,
    stdin: str | None = None,
) -> Run:
    """Wait for ``proc`` (killing its whole session past ``timeout``) and collect what it left behind."""
    started = time.monotonic() if started is None else started
    try:
        proc.communicate(stdin.encode() if stdin is not None else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        proc.wait()
        raise AssertionError(f"{proc.args!r} did not finish within {timeout:.0f} s:\n{_tail(log)}") from None
    elapsed = time.monotonic() - started
    leftovers = session_processes(proc.pid, wait=10.0)
    kill_session(proc.pid)
    return Run(proc.returncode, log.read_text(errors="replace"), elapsed, leftovers)


def run(
    command: Sequence[str],
    log: Path,
    timeout: float = TIMEOUT,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> Run:
    """Run ``command`` to the end (see :func:`start` and :func:`finish`)."""
    started = time.monotonic()
    proc = start(command, log, env, cwd, stdin)
    return finish(proc, log, timeout, started, stdin)


def train(out: Path, *args: str, timeout: float = TIMEOUT, env: dict[str, str] | None = None) -> Run:
    """Run ``scripts/train.py --out OUT ARGS`` with this interpreter."""
    out.mkdir(parents=True, exist_ok=True)
    return run([sys.executable, str(TRAIN), "--out", str(out), *args], out / "output.log", timeout, env)


def _tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# -- processes ----------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, already dead, counts as gone)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def session_processes(session: int, wait: float = 0.0) -> list[int]:
    """Live processes of ``session``, after waiting up to ``wait`` seconds for them to end."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                fields = _stat(int(entry.name))
                if fields is not None and fields[0] not in ("Z", "X") and int(fields[3]) == session:
                    found.append(int(entry.name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` (its leader's process group and any strays)."""
    try:
        os.killpg(session, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in session_processes(session):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- records --------------------------------------------------------------------------------------


def records(out: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """The JSON records ``<prefix>*.json`` under ``out``, by the rest of their name."""
    return {p.stem[len(prefix) :]: json.loads(p.read_text()) for p in sorted(out.glob(f"{prefix}*.json"))}


def rank_records(out: Path) -> dict[int, dict[str, Any]]:
    """``rank<R>.json`` by global rank R."""
    return {int(k): v for k, v in records(out, "rank").items()}


# -- the reference ----------------------------------------------------------------------------------


def reference_state(
    epochs: int = 2,
    world_size: int = 2,
    samples: int = 64,
    batch_size: int = 8,
    accumulate: int = 1,
    clip: float | None = None,
) -> dict[str, torch.Tensor]:
    """The weights data-parallel training must reach, computed here in one process.

    Each optimizer step sums the gradients of every rank's batch (the batches a DistributedSampler
    gives each rank, seed 0, shuffled per epoch) divided by ``world_size × accumulate``: exactly the
    average DDP's all-reduce forms, with accumulation as the Trainer does it.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # Regressor seeds the global generator
            return _train_reference(epochs, world_size, samples, batch_size, accumulate, clip)
    finally:
        torch.set_num_threads(threads)


def _train_reference(
    epochs: int, world_size: int, samples: int, batch_size: int, accumulate: int, clip: float | None
) -> dict[str, torch.Tensor]:
    model = common.Regressor()
    optimizer = model.configure_optimizers()
    data = common.dataset(samples)
    for epoch in range(epochs):
        shards: list[list[int]] = []
        for rank in range(world_size):
            sampler: DistributedSampler[Any] = DistributedSampler(
                data, num_replicas=world_size, rank=rank, shuffle=True, seed=0
            )
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        batches = -(-len(shards[0]) // batch_size)
        for k in range(batches):
            for shard in shards:
                x, y = data[shard[k * batch_size : (k + 1) * batch_size]]
                loss = torch.nn.functional.mse_loss(model(x), y) / (world_size * accumulate)
                loss.backward()
            if (k + 1) % accumulate == 0 or k + 1 == batches:
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_close_states(
    actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Same keys, and every tensor close (see ``torch.testing.assert_close``)."""
    assert sorted(actual) == sorted(expected)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=rtol, atol=atol, msg=f"{key} differs")
