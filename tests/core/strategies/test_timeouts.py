"""Nothing waits forever for a rank: bounded, configurable waits, and errors that name the rank at fault.

* ``num_nodes=2`` started on one machine, or a rank that never starts: the others give up after
  ``TORCHPLUG_JOIN_TIMEOUT`` seconds, naming the missing rank and its node.
* A rank that hangs mid-training: the others' collective fails after ``TORCHPLUG_COLLECTIVE_TIMEOUT``
  seconds, naming the rank that never reached it and where its main thread was.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

import torchplug
from tests.core.strategies.runner import environment, free_port, linux_only, records, train
from torchplug.strategies.ddp import DDPStrategy
from torchplug.utilities.distributed import collective_timeout

#: Seconds a run that gives up may take: Python and torch start (a few seconds each on this busy
#: machine), the wait under test (5 or 8 s), and the processes' exit.
BOUND = 90.0


def error_of(out: Path) -> dict[str, object]:
    (error,) = [e for e in records(out, "error_").values() if e["type"] != "ChildProcessError"]
    return error


@pytest.mark.slow
@linux_only
def test_num_nodes_2_on_one_machine_names_the_missing_node(tmp_path: Path) -> None:
    env = environment(TORCHPLUG_JOIN_TIMEOUT="5")
    result = train(tmp_path, "--strategy", "ddp", "--devices", "1", "--num-nodes", "2", "--catch", env=env)
    assert result.returncode != 0
    assert result.elapsed < BOUND, result.tail()
    error = error_of(tmp_path)
    assert error["type"] == "JoinTimeoutError"
    message = str(error["message"])
    assert message.startswith("Rank 1 (node 1) of 2 did not join the process group at 127.0.0.1:")
    assert "within 5 s (TORCHPLUG_JOIN_TIMEOUT=5). Joined: rank 0 (" in message
    assert "Hint: num_nodes=2 runs 1 process(es) on each of 2 machines: start the same command on every machine" in (
        message
    )
    assert not result.leftovers


@pytest.mark.slow
@linux_only
def test_a_rank_whose_rank_zero_never_starts_gives_up_naming_the_rendezvous(tmp_path: Path) -> None:
    port = free_port()
    env = environment(TORCHPLUG_JOIN_TIMEOUT="5", NODE_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result = train(tmp_path, "--strategy", "ddp", "--devices", "1", "--num-nodes", "2", "--catch", env=env)
    assert result.returncode != 0
    assert result.elapsed < BOUND, result.tail()
    error = error_of(tmp_path)
    assert error["type"] == "JoinTimeoutError"
    assert str(error["message"]).startswith(
        f"Rank 1 could not reach rank 0's rendezvous at 127.0.0.1:{port} within 5 s (TORCHPLUG_JOIN_TIMEOUT=5)"
    )
    assert not result.leftovers


@pytest.mark.slow
@linux_only
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_a_rank_that_hangs_mid_training_is_named_after_the_collective_timeout(tmp_path: Path, strategy: str) -> None:
    env = environment(TORCHPLUG_COLLECTIVE_TIMEOUT="8", TORCHPLUG_RANK_FAILURE_TIMEOUT="5")
    result = train(tmp_path, "--strategy", strategy, "--stall-rank", "1", "--crash-step", "3", "--catch", env=env)
    assert result.returncode != 0
    assert result.elapsed < BOUND + 8, result.tail()
    assert "RankStallError: Rank(s) 1 never reached the collective that rank 0 waited in for 8 s" in result.output
    assert "rank 1: not in a collective, in training_step (" in result.output
    assert "time.sleep(3600)" in result.output  # where rank 1 was stuck
    assert "rank 0: waiting for the others" in result.output
    assert not result.leftovers


def test_the_collective_timeout_is_600_s_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHPLUG_COLLECTIVE_TIMEOUT", raising=False)
    assert collective_timeout() == timedelta(seconds=600)
    monkeypatch.setenv("TORCHPLUG_COLLECTIVE_TIMEOUT", "45")
    assert collective_timeout() == timedelta(seconds=45)


@pytest.mark.parametrize("name", ["TORCHPLUG_COLLECTIVE_TIMEOUT", "TORCHPLUG_JOIN_TIMEOUT"])
@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf"])
def test_a_bad_timeout_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    from torchplug.utilities import distributed

    monkeypatch.setenv(name, value)
    read = collective_timeout if name == "TORCHPLUG_COLLECTIVE_TIMEOUT" else distributed._join_timeout
    with pytest.raises(torchplug.SettingsError, match=rf"^{name}='{value}' is not valid"):
        read()


def test_the_strategys_timeout_wins_over_the_variable() -> None:
    assert DDPStrategy(timeout=timedelta(minutes=45)).timeout == timedelta(minutes=45)
    assert DDPStrategy().timeout is None  # resolved from TORCHPLUG_COLLECTIVE_TIMEOUT when the group is joined


def test_the_strategys_timeout_may_be_a_number_of_seconds() -> None:
    assert DDPStrategy(timeout=90).timeout == timedelta(seconds=90)
    assert DDPStrategy(timeout=2.5).timeout == timedelta(seconds=2.5)


@pytest.mark.parametrize("timeout", [0, -5, float("inf"), True, "30", timedelta(0)], ids=repr)
def test_a_timeout_that_is_no_duration_is_refused_when_the_strategy_is_made(timeout: object) -> None:
    with pytest.raises(
        torchplug.MisconfigurationError, match=rf"^{re.escape(f'timeout={timeout!r}')} is not valid: .* Hint: "
    ):
        DDPStrategy(timeout=timeout)  # type: ignore[arg-type]
