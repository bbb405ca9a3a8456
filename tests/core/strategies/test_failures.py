"""A rank that fails: the run must end soon, with an error that names the rank, and leave no process behind.

Every run is a subprocess in its own session with a time limit, so a hang fails the test instead of
the suite; afterwards no process of that session may be alive. "Soon" is :data:`BOUND`: a run that
waited for its lost peer would instead sit in a collective until the process group's timeout
(30 minutes by default).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.core.strategies.runner import TORCHRUN, TRAIN, Run, alive, environment, linux_only, records, run, train

pytestmark = [pytest.mark.slow, linux_only]

#: Short, so that the launcher's watchdog would end a stuck rank 0 soon (only one test needs it).
FAILURE_TIMEOUT = "5"

#: Seconds a failing run may take from launch to the exit of its last process: imports and three
#: steps take about 5 s here; the rest is room for a machine shared with other test runs.
BOUND = 90.0


def started_pids(out: Path) -> dict[str, int]:
    started = records(out, "started_rank")
    assert sorted(started) == ["0", "1"], "both ranks should have joined before the failure"
    return {rank: record["pid"] for rank, record in started.items()}


def assert_nothing_left(out: Path, result: Run) -> None:
    assert result.elapsed < BOUND, f"the run took {result.elapsed:.0f} s to stop\n{result.tail()}"
    assert not result.leftovers, f"processes left: {result.leftovers}\n{result.tail()}"
    assert not [pid for pid in started_pids(out).values() if alive(pid)]


def errors(out: Path) -> list[dict[str, Any]]:
    return list(records(out, "error_").values())


def crash(out: Path, strategy: str, rank: int, how: str = "raise", *extra: str) -> Run:
    env = environment(TORCHPLUG_RANK_FAILURE_TIMEOUT=FAILURE_TIMEOUT)
    return train(
        out,
        "--strategy",
        strategy,
        "--crash-rank",
        str(rank),
        "--crash-step",
        "3",
        "--crash-how",
        how,
        "--catch",
        *extra,
        env=env,
    )


def test_a_child_rank_that_raises_stops_rank_zero_with_an_error_naming_it(tmp_path: Path) -> None:
    result = crash(tmp_path, "ddp", rank=1)
    assert result.returncode != 0
    assert "rank 1 fails on purpose at step 3" in result.output  # rank 1's own traceback is shown
    pids = started_pids(tmp_path)
    rank0 = [e for e in errors(tmp_path) if e["pid"] == pids["0"]]
    assert len(rank0) == 1, errors(tmp_path)
    assert rank0[0]["type"] == "ChildProcessError"
    # "failed" when rank 0 read rank 1's note while rank 1 was still exiting, else its exit code.
    assert re.fullmatch(
        rf"Local rank 1 \(pid {pids['1']}\) (failed|exited with code 1); the other ranks were "
        r"stopped\. Its error: RuntimeError: rank 1 fails on purpose at step 3",
        rank0[0]["message"],
    )
    assert "did not stop within" not in result.output  # rank 0 stopped by itself, not by the watchdog
    assert_nothing_left(tmp_path, result)


def test_rank_zero_that_raises_stops_its_children(tmp_path: Path) -> None:
    result = crash(tmp_path, "ddp", rank=0)
    assert result.returncode != 0
    pids = started_pids(tmp_path)
    rank0 = [e for e in errors(tmp_path) if e["pid"] == pids["0"]]
    assert [(e["type"], e["message"]) for e in rank0] == [("RuntimeError", "rank 0 fails on purpose at step 3")]
    assert "exited with code" not in result.output  # the children were stopped on purpose: no false blame
    assert_nothing_left(tmp_path, result)


def test_rank_zero_killed_outright_leaves_no_child_behind(tmp_path: Path) -> None:
    result = crash(tmp_path, "ddp", rank=0, how="kill")
    assert result.returncode == -9
    assert_nothing_left(tmp_path, result)  # rank 1 sees the broken connection, or its parent gone


def test_a_child_rank_killed_outright_is_named(tmp_path: Path) -> None:
    result = crash(tmp_path, "ddp", rank=1, how="kill")
    assert result.returncode != 0
    pids = started_pids(tmp_path)
    rank0 = [e for e in errors(tmp_path) if e["pid"] == pids["0"]]
    assert [(e["type"], e["message"]) for e in rank0] == [
        ("ChildProcessError", f"Local rank 1 (pid {pids['1']}) was killed by signal 9; the other ranks were stopped.")
    ]
    assert_nothing_left(tmp_path, result)


def test_rank_zero_stuck_outside_a_collective_is_ended_by_the_watchdog(tmp_path: Path) -> None:
    # Rank 0 sleeps in its training_step (as in a long computation): no collective tells it that
    # rank 1 has failed. The watchdog ends it TORCHPLUG_RANK_FAILURE_TIMEOUT seconds after the failure.
    result = crash(tmp_path, "ddp", 1, "raise", "--stall-rank", "0")
    assert result.returncode == 1
    pids = started_pids(tmp_path)
    assert re.search(
        rf"^torchplug: Local rank 1 \(pid {pids['1']}\) exited with code 1; the other ranks were "
        r"stopped\. Its error: RuntimeError: rank 1 fails on purpose at step 3\n"
        rf"torchplug: rank 0 did not stop within {FAILURE_TIMEOUT} s of that failure \(set "
        r"TORCHPLUG_RANK_FAILURE_TIMEOUT to wait longer\); exiting\.$",
        result.output,
        re.MULTILINE,
    )
    assert [e["pid"] for e in errors(tmp_path)] == [pids["1"]]  # rank 0 never got to raise
    assert_nothing_left(tmp_path, result)


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_a_worker_that_raises_fails_the_caller_with_an_error_naming_it(tmp_path: Path, strategy: str) -> None:
    result = crash(tmp_path, strategy, rank=1)
    assert result.returncode != 0
    pids = set(started_pids(tmp_path).values())
    caller = [e for e in errors(tmp_path) if e["pid"] not in pids]
    assert len(caller) == 1, errors(tmp_path)
    assert caller[0]["type"] == "ProcessRaisedException"
    assert caller[0]["error_index"] == 1
    assert "Process 1 terminated with the following error" in str(caller[0]["message"])
    assert "rank 1 fails on purpose at step 3" in str(caller[0]["message"])
    assert_nothing_left(tmp_path, result)


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_a_worker_killed_outright_is_named_as_under_ddp(tmp_path: Path, strategy: str) -> None:
    result = crash(tmp_path, strategy, rank=1, how="kill")
    assert result.returncode != 0
    pids = started_pids(tmp_path)
    caller = [e for e in errors(tmp_path) if e["pid"] not in set(pids.values())]
    assert [(e["type"], e["message"]) for e in caller] == [
        ("ChildProcessError", f"Local rank 1 (pid {pids['1']}) was killed by signal 9; the other ranks were stopped.")
    ]
    assert "ProcessExitedException" not in result.output
    assert_nothing_left(tmp_path, result)


def test_torchrun_reports_a_failed_rank_and_stops_the_others(tmp_path: Path) -> None:
    command = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node",
        "2",
        str(TRAIN),
        "--out",
        str(tmp_path),
        "--strategy",
        "ddp",
        "--crash-rank",
        "1",
        "--crash-step",
        "3",
    ]
    result = run(command, tmp_path / "output.log", env=environment(TORCHPLUG_RANK_FAILURE_TIMEOUT=FAILURE_TIMEOUT))
    assert result.returncode != 0
    assert "rank 1 fails on purpose at step 3" in result.output
    assert "ChildFailedError" in result.output
    assert_nothing_left(tmp_path, result)
