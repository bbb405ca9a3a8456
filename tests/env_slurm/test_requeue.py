"""``scontrol requeue``: the argument list, the job id check, and every failure, against a real stand-in scontrol.

The stand-in is an executable on PATH that records its arguments (the ``fake_scontrol``
fixture), so the command really runs, without a shell, as it would on a cluster.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.env_slurm.conftest import calls
from tests.env_slurm.test_detection import SRUN_TASK
from tests.environment_support import set_env
from torchplug import MisconfigurationError
from torchplug_slurm import RequeueError, SLURMEnvironment
from torchplug_slurm._vendor import requeue_command, requeue_job


def test_argv_is_a_list_without_shell(fake_scontrol: Path) -> None:
    argv = requeue_command("4242")
    assert argv == [str(fake_scontrol.parent / "bin" / "scontrol"), "requeue", "4242"]
    assert requeue_job("4242") == ""
    assert calls(fake_scontrol) == [["requeue", "4242"]]


def test_array_task_id(fake_scontrol: Path) -> None:
    requeue_job("4242_7")
    assert calls(fake_scontrol) == [["requeue", "4242_7"]]


@pytest.mark.parametrize(
    "job_id",
    ["12; touch /tmp/pwned", "12 13", "$(id)", "12\n13", "", "abc", "123_", "_4", "-1", "12-3", " 12", "１２"],
    ids=[
        "semicolon",
        "space",
        "substitution",
        "newline",
        "empty",
        "letters",
        "trailing-underscore",
        "leading-underscore",
        "negative",
        "dash",
        "leading-space",
        "fullwidth-digits",
    ],
)
def test_bad_job_ids_are_refused_before_anything_runs(fake_scontrol: Path, job_id: str) -> None:
    with pytest.raises(RequeueError, match=r"Refusing to run scontrol requeue with the job id .*: a SLURM job id is"):
        requeue_job(job_id)
    assert calls(fake_scontrol) == []


def test_missing_scontrol_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        RequeueError,
        match=r"Cannot requeue SLURM job 12: the scontrol command is not on PATH.*"
        r"TORCHPLUG_SLURM_SCONTROL",
    ):
        requeue_job("12")


def test_scontrol_from_the_environment_variable(
    fake_scontrol: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = fake_scontrol.parent / "bin" / "scontrol"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("TORCHPLUG_SLURM_SCONTROL", str(program))
    requeue_job("12")
    assert calls(fake_scontrol) == [["requeue", "12"]]


@pytest.mark.parametrize(
    ("output", "hint"),
    [
        ("Requested operation is presently disabled for job 16", "submit the job with sbatch --requeue"),
        ("Only batch jobs are accepted or processed for job 15", "only batch jobs can be requeued"),
        ("Access/permission denied for job 15", "owner or an operator"),
        ("Invalid job id specified for job 99999", "man scontrol"),
    ],
    ids=["not-requeueable", "not-a-batch-job", "permission", "other"],
)
def test_nonzero_exit_is_reported_with_a_hint(
    fake_scontrol: Path, monkeypatch: pytest.MonkeyPatch, output: str, hint: str
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "1")
    monkeypatch.setenv("FAKE_OUTPUT", output)
    with pytest.raises(RequeueError, match=r"requeue 12 exited with code 1") as info:
        requeue_job("12")
    assert output in str(info.value)
    assert hint in str(info.value)
    assert len(calls(fake_scontrol)) == 1  # tried once: no retry, no shell fallback


def test_program_that_cannot_run(tmp_path: Path) -> None:
    not_executable = tmp_path / "scontrol"
    not_executable.write_text("not a program")
    with pytest.raises(RequeueError, match=r"running \[.*'requeue', '12'\] failed"):
        requeue_job("12", scontrol=str(not_executable))


# -- through the environment -------------------------------------------------------------------


def test_environment_requeues_its_job_after_the_signal(monkeypatch: pytest.MonkeyPatch, fake_scontrol: Path) -> None:
    set_env(monkeypatch, SRUN_TASK)
    environment = SLURMEnvironment()
    environment.setup_preemption()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        environment.requeue()
    finally:
        environment.teardown_preemption()
    assert calls(fake_scontrol) == [["requeue", "12"]]


def test_environment_requeues_the_array_task(monkeypatch: pytest.MonkeyPatch, fake_scontrol: Path) -> None:
    set_env(monkeypatch, {**SRUN_TASK, "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "3"})
    SLURMEnvironment().requeue()
    assert calls(fake_scontrol) == [["requeue", "10_3"]]


def test_environment_refuses_a_tampered_job_id(monkeypatch: pytest.MonkeyPatch, fake_scontrol: Path) -> None:
    set_env(monkeypatch, {**SRUN_TASK, "SLURM_JOB_ID": "12;reboot"})
    with pytest.raises(MisconfigurationError, match=r"The SLURM job id '12;reboot'"):
        SLURMEnvironment().requeue()
    assert calls(fake_scontrol) == []


def test_environment_without_job(fake_scontrol: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"Cannot requeue: SLURM_JOB_ID is not set"):
        SLURMEnvironment().requeue()
