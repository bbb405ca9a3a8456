"""Detection: a task of an srun step is SLURM; salloc shells, batch scripts and interactive shells are not.

The variable sets are the ones SLURM 22.05 exported on the loopback cluster (see
``shared/notes/slurm.md`` and ``test_cluster.py``, which checks the same cases for real).
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.environment_support import set_env
from torchplug import plugin_host
from torchplug.environments.detection import select_cluster_environment
from torchplug_slurm import SLURMEnvironment

#: A task of ``srun -n2 python train.py`` (task 1).
SRUN_TASK = {
    "SLURM_JOB_ID": "12",
    "SLURM_JOB_NAME": "train.sh",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_NODELIST": "vm",
    "SLURM_JOB_NODELIST": "vm",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_TASK_PID": "999999",
}
#: The shell of ``salloc -n2`` (job name "interactive" by default; no step, no rank).
SALLOC_SHELL = {
    "SLURM_JOB_ID": "4",
    "SLURM_JOB_NAME": "interactive",
    "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_NNODES": "1",
}
#: The batch script of ``sbatch -n2`` (rank variables, but no step).
BATCH_SCRIPT = {
    "SLURM_JOB_ID": "2",
    "SLURM_JOB_NAME": "wrap",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_TASK_PID": "2357",
}
#: salloc's interactive step (LaunchParameters=use_interactive_step).
INTERACTIVE_STEP = {
    **SRUN_TASK,
    "SLURM_STEP_ID": "4294967290",
    "SLURM_STEPID": "4294967290",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_PTY_PORT": "39775",
    "SLURM_JOB_NAME": "interactive",
}
#: A Python started from the shell of ``srun --pty bash`` (the task is the shell, not us).
PTY_SHELL = {
    **SRUN_TASK,
    "SLURM_JOB_NAME": "bash",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_PTY_PORT": "32857",
}


@pytest.mark.parametrize(
    ("env", "expected", "reason"),
    [
        pytest.param(SRUN_TASK, True, "SLURM_JOB_ID=12, SLURM_STEP_ID=0, SLURM_NTASKS=2", id="srun-task"),
        pytest.param({}, False, "SLURM_JOB_ID not set", id="plain-machine"),
        pytest.param(SALLOC_SHELL, False, "SLURM_STEP_ID not set: a salloc shell or batch script", id="salloc-shell"),
        pytest.param(BATCH_SCRIPT, False, "SLURM_STEP_ID not set", id="batch-script"),
        pytest.param(
            INTERACTIVE_STEP, False, "SLURM_STEP_ID=4294967290 is not an srun step", id="salloc-interactive-step"
        ),
        pytest.param(PTY_SHELL, False, "a shell started with srun --pty", id="srun-pty-bash"),
        pytest.param(
            {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "interactive"},
            False,
            "SLURM_JOB_NAME=interactive (an interactive job)",
            id="job-name-interactive",
        ),
        pytest.param(
            {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "bash"},
            False,
            "SLURM_JOB_NAME=bash",
            id="job-name-bash",
        ),
        pytest.param(
            {**SRUN_TASK, "SLURM_JOB_NAME": "interactive"},
            True,
            "SLURM_JOB_NAME=interactive ignored with several tasks",
            id="srun-n2-inside-salloc",
        ),
        pytest.param(
            {k: v for k, v in SRUN_TASK.items() if k != "SLURM_PROCID"}, False, "but not SLURM_PROCID", id="no-procid"
        ),
        pytest.param(
            {k: v for k, v in SRUN_TASK.items() if k != "SLURM_NTASKS"}, False, "but not SLURM_NTASKS", id="no-ntasks"
        ),
        pytest.param(
            {**SRUN_TASK, "SLURM_NTASKS": "two"}, False, "SLURM_NTASKS='two' is not an integer", id="bad-ntasks"
        ),
        pytest.param(
            {**SRUN_TASK, "SLURM_STEP_ID": "x"}, False, "SLURM_STEP_ID=x is not an srun step", id="bad-step-id"
        ),
        pytest.param(
            {k: v for k, v in SRUN_TASK.items() if not k.startswith("SLURM_STEP")} | {"SLURM_STEPID": "3"},
            True,
            "SLURM_STEP_ID=3",
            id="old-stepid-name",
        ),
    ],
)
def test_detect(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool, reason: str) -> None:
    set_env(monkeypatch, env)
    assert SLURMEnvironment.detect() is expected
    assert reason in SLURMEnvironment.detect_reason()


def test_srun_pty_python_itself_is_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """``srun --pty python train.py``: the task is this process, so it is SLURM despite the terminal."""
    set_env(monkeypatch, {**PTY_SHELL, "SLURM_JOB_NAME": "train", "SLURM_TASK_PID": str(os.getpid())})
    assert SLURMEnvironment.detect() is True


def test_detect_writes_nothing_and_warns_nothing(
    monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    """Unlike Lightning: no MASTER_ADDR/PORT written, no "srun is available but not used" warning."""
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin")  # srun may be on PATH
    for env in ({}, SRUN_TASK, SALLOC_SHELL):
        set_env(monkeypatch, env)
        before = dict(os.environ)
        SLURMEnvironment.detect()
        SLURMEnvironment.detect_reason()
        assert dict(os.environ) == before
    assert not recwarn.list


def test_priority_is_below_torchelastic() -> None:
    from torchplug.environments.torchelastic import TorchElasticEnvironment

    assert SLURMEnvironment.detect_priority == 90 < TorchElasticEnvironment.detect_priority


def _selected() -> tuple[str, tuple[str, ...]]:
    selection = select_cluster_environment(plugin_host().registry("cluster_environment"))
    return selection.name, selection.trace


def test_the_core_selects_slurm_for_an_srun_task(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SRUN_TASK)
    name, trace = _selected()
    assert name == "slurm"
    assert "slurm: detected (SLURM_JOB_ID=12, SLURM_STEP_ID=0, SLURM_NTASKS=2)" in trace


def test_torchrun_inside_slurm_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(
        monkeypatch,
        {
            **SRUN_TASK,
            "TORCHELASTIC_RUN_ID": "x",
            "WORLD_SIZE": "4",
            "RANK": "0",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "vm",
            "MASTER_PORT": "29500",
        },
    )
    assert _selected()[0] == "torchelastic"


def test_the_core_switch_turns_detection_off(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**SRUN_TASK, "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS": "slurm"})
    name, trace = _selected()
    assert name == "local"
    assert "slurm: skipped (TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)" in trace


def test_the_core_can_force_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**BATCH_SCRIPT, "SLURM_NTASKS": "1", "TORCHPLUG_CLUSTER_ENVIRONMENT": "slurm"})
    name, trace = _selected()
    assert name == "slurm"
    assert "its detect() says no; used anyway" in trace[0]


def test_the_environment_supplies_only_its_evidence() -> None:
    """detect() and detect_reason() come from the core's ClusterEnvironment, derived from evidence()."""
    assert "evidence" in vars(SLURMEnvironment)
    assert not {"detect", "detect_reason"} & set(vars(SLURMEnvironment))
