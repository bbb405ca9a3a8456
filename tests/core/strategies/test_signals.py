"""SIGINT and SIGTERM during ``fit``, with real processes: one process, ``ddp``, ``ddp_spawn``, ``ddp_fork``, torchrun.

Every run is ``scripts/interrupt.py`` in a session of its own; the test waits until rank 0 trained a
few steps, sends the signal, and checks what a user relies on: every process stopped after the
same step, ``interrupted.ckpt`` holds that step (and resumes), the CSV logger wrote a row for every
step (nothing lost in its buffer), no process is left, the exit status is 130 or 143, and all of
it within :data:`BOUND` seconds. A second signal exits at once, even while the first is being
handled.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import SCRIPTS, TORCHRUN, Run, alive, finish, linux_only, run, start

pytestmark = [pytest.mark.slow, linux_only]

INTERRUPT = SCRIPTS / "interrupt.py"
#: Seconds from the signal to the exit of the last process: a step (0.1 s), a checkpoint of a small
#: model, the loggers, and Python's exit, on a machine shared with other test runs.
BOUND = 60.0


def launch(root: Path, *args: str, torchrun: bool = False) -> tuple[object, Path]:
    root.mkdir(parents=True, exist_ok=True)
    script = [sys.executable, str(INTERRUPT)]
    if torchrun:
        script = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(INTERRUPT)]
    return start([*script, "--root", str(root), *args], root / "output.log"), root


def wait_ready(proc: object, root: Path, timeout: float = 180.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while not (root / "ready").exists():
        assert proc.poll() is None, (root / "output.log").read_text()  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "rank 0 never reached the ready step"
        time.sleep(0.05)
    pids: dict[str, int] = json.loads((root / "ready").read_text())
    return pids


def interrupt(
    tmp_path: Path, signum: int, *args: str, to: str = "main", torchrun: bool = False, second_after: float = 0.0
) -> tuple[Run, Path, dict[str, int]]:
    """Start a run, send ``signum`` once rank 0 is training (``to``: the main process or its whole group)."""
    proc, root = launch(tmp_path / "run", *args, torchrun=torchrun)
    pids = wait_ready(proc, root)
    sent = time.monotonic()
    if to == "group":  # what a terminal's Ctrl+C does: every process of the foreground group
        os.killpg(proc.pid, signum)  # type: ignore[attr-defined]
    else:
        os.kill(proc.pid, signum)  # type: ignore[attr-defined]
    if second_after:
        deadline = time.monotonic() + 60
        while not list(root.glob("winding_down_rank*")):
            assert time.monotonic() < deadline, "the first signal never reached the exception hooks"
            time.sleep(0.05)
        time.sleep(second_after)
        sent = time.monotonic()
        os.kill(proc.pid, signum)  # type: ignore[attr-defined]
    result = finish(proc, root / "output.log", timeout=BOUND * 3, started=sent)  # type: ignore[arg-type]
    return result, root, pids


def logged_steps(root: Path) -> list[int]:
    with open(root / "torchplug_logs" / "run" / "metrics.csv") as file:
        return [int(row["step"]) for row in csv.DictReader(file) if row.get("loss")]


def assert_stopped_cleanly(result: Run, root: Path, pids: dict[str, int], signum: int, agent: bool = False) -> int:
    """The common checks; returns the global step every process stopped after.

    ``agent``: torchrun's agent prints its own traceback when a signal stops it (its SignalException).
    """
    assert result.elapsed < BOUND, f"took {result.elapsed:.0f} s to stop\n{result.tail()}"
    assert not result.leftovers, f"processes left: {result.leftovers}\n{result.tail()}"
    assert not [pid for pid in pids.values() if alive(pid)]
    checkpoint = torch.load(root / "ckpts" / "interrupted.ckpt", weights_only=True)
    step = int(checkpoint["global_step"])
    assert 3 <= step < 400, result.tail()
    assert f"fit() stopped by {signal.Signals(signum).name} after global step {step}." in result.output
    assert logged_steps(root) == list(range(step)), "the CSV logger lost rows"
    assert "FINISHED" not in result.output
    tracebacks = result.output.count("Traceback")
    assert tracebacks == (1 if agent else 0), result.tail()
    if agent:
        assert "torch.distributed.elastic.multiprocessing.api.SignalException" in result.output
    return step


def resume(tmp_path: Path, root: Path, step: int, *args: str) -> None:
    again = run(
        [sys.executable, str(INTERRUPT), "--root", str(tmp_path / "again"), "--max-steps", str(step + 3), "--pause",
         "0", "--resume", str(root / "ckpts" / "interrupted.ckpt"), *args],
        tmp_path / "again.log",
    )  # fmt: skip
    assert again.returncode == 0, again.tail()
    assert f"FINISHED {step + 3}" in again.output


# -- one process -------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_one_process_stops_after_the_step_with_a_checkpoint_and_flushed_logs(tmp_path: Path, signum: int) -> None:
    result, root, pids = interrupt(tmp_path, signum)
    assert result.returncode == 128 + signum, result.tail()
    step = assert_stopped_cleanly(result, root, pids, signum)
    resume(tmp_path, root, step)


def test_the_checkpoint_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path: Path) -> None:
    result, root, _ = interrupt(tmp_path, signal.SIGTERM, "--max-steps", "400")
    assert result.returncode == 143, result.tail()
    step = int(torch.load(root / "ckpts" / "interrupted.ckpt", weights_only=True)["global_step"])
    resumed = run(
        [sys.executable, str(INTERRUPT), "--root", str(tmp_path / "resumed"), "--max-steps", str(step + 5),
         "--pause", "0", "--resume", str(root / "ckpts" / "interrupted.ckpt")],
        tmp_path / "resumed.log",
    )  # fmt: skip
    straight = run(
        [sys.executable, str(INTERRUPT), "--root", str(tmp_path / "straight"), "--max-steps", str(step + 5),
         "--pause", "0"],
        tmp_path / "straight.log",
    )  # fmt: skip
    assert resumed.returncode == 0 and straight.returncode == 0, resumed.tail() + straight.tail()
    a = torch.load(tmp_path / "resumed" / "final_rank0.pt")
    b = torch.load(tmp_path / "straight" / "final_rank0.pt")
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    result, root, _ = interrupt(tmp_path, signal.SIGTERM, "--slow-exception-hooks", "120", second_after=0.5)
    assert result.returncode == 143, result.tail()
    assert result.elapsed < 10, f"the second signal took {result.elapsed:.0f} s\n{result.tail()}"
    assert "SIGTERM again: exiting now, without a checkpoint." in result.output
    assert not result.leftovers
    assert not (root / "ckpts" / "interrupted.ckpt").exists()


def test_a_handler_of_the_users_own_is_left_in_place(tmp_path: Path) -> None:
    import torchplug
    from tests.core.strategies.scripts.common import Regressor, loader

    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        trainer = torchplug.Trainer(
            accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False
        )
        trainer.fit(Regressor(), loader(16, 8))
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- several processes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "signum", "to"),
    [
        ("ddp", signal.SIGTERM, "main"),  # rank 0 alone gets it: the others learn it through the store
        ("ddp", signal.SIGINT, "group"),  # Ctrl+C: every rank gets it
        ("ddp_spawn", signal.SIGINT, "main"),  # the caller passes it on to its workers
        ("ddp_spawn", signal.SIGTERM, "group"),
        ("ddp_fork", signal.SIGTERM, "main"),
    ],
    ids=["ddp-SIGTERM-rank0", "ddp-SIGINT-group", "ddp_spawn-SIGINT-caller", "ddp_spawn-SIGTERM-group",
         "ddp_fork-SIGTERM-caller"],
)  # fmt: skip
def test_every_rank_stops_after_the_same_step(tmp_path: Path, strategy: str, signum: int, to: str) -> None:
    result, root, pids = interrupt(tmp_path, signum, "--strategy", strategy, "--devices", "2", to=to)
    assert result.returncode == 128 + signum, result.tail()
    step = assert_stopped_cleanly(result, root, pids, signum)
    resume(tmp_path, root, step, "--strategy", strategy, "--devices", "2")


def test_torchrun_workers_stop_after_the_same_step_when_the_agent_gets_sigterm(tmp_path: Path) -> None:
    result, root, pids = interrupt(tmp_path, signal.SIGTERM, "--strategy", "ddp", "--devices", "2", torchrun=True)
    assert_stopped_cleanly(result, root, pids, signal.SIGTERM, agent=True)


def test_a_second_signal_to_ddp_rank_zero_stops_its_children_too(tmp_path: Path) -> None:
    args = ("--strategy", "ddp", "--devices", "2", "--slow-exception-hooks", "120")
    result, _, pids = interrupt(tmp_path, signal.SIGTERM, *args, second_after=0.5)
    assert result.returncode == 143, result.tail()
    assert result.elapsed < 15, f"the second signal took {result.elapsed:.0f} s\n{result.tail()}"
    assert not result.leftovers
    assert not [pid for pid in pids.values() if alive(pid)]
