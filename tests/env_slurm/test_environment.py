"""Ranks, rendezvous and validation of SLURMEnvironment, read from the SLURM_* variables of a task."""

from __future__ import annotations

import os
import signal

import pytest

from tests.env_slurm.test_detection import SRUN_TASK
from tests.environment_support import set_env
from torchplug import MisconfigurationError, SettingsError
from torchplug_slurm import SLURMEnvironment
from torchplug_slurm._rendezvous import PORT_BASE, PORT_SPAN, derive_port
from torchplug_slurm._variables import BATCH_STEP_ID, expand_counts

#: Task 5 of ``sbatch --nodes=2 --ntasks-per-node=4`` + ``srun python train.py``, on the second node.
TWO_NODES = {
    "SLURM_JOB_ID": "123456789",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_NTASKS_PER_NODE": "4",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_STEP_NODELIST": "rack[1-2]-node[01-04],gpu7",
    "SLURM_JOB_NODELIST": "other[1-9]",
}


def env_with(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> SLURMEnvironment:
    set_env(monkeypatch, values)
    return SLURMEnvironment()


def test_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, TWO_NODES)
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 5, 1, 1)
    assert env.processes_per_node() == 4


def test_setters_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, TWO_NODES)
    env.set_world_size(2)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 5)


def test_nothing_is_written_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, TWO_NODES)
    before = dict(os.environ)
    _ = (env.main_address, env.main_port, env.world_size(), env.processes_per_node())
    env.validate_settings(4, 2)
    env.teardown()
    assert dict(os.environ) == before


def test_missing_rank_variable_says_how_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, {"SLURM_JOB_ID": "1"})
    with pytest.raises(MisconfigurationError, match=r"SLURM_PROCID is not set.*srun python train.py"):
        env.global_rank()


def test_bad_rank_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, {**TWO_NODES, "SLURM_LOCALID": "one"})
    with pytest.raises(MisconfigurationError, match=r"SLURM_LOCALID='one' is not an integer"):
        env.local_rank()


# -- processes per node ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2", [2]), ("2(x3),1", [2, 2, 2, 1]), ("4(x2)", [4, 4]), ("1,2(x2),3", [1, 2, 2, 3]), (" 2 ,1", [2, 1])],
)
def test_expand_counts(text: str, expected: list[int]) -> None:
    assert expand_counts(text) == expected


@pytest.mark.parametrize("text", ["", "2x3", "2(3)", "a", "2(x)"])
def test_expand_counts_errors(text: str) -> None:
    with pytest.raises(MisconfigurationError, match=r"SLURM_TASKS_PER_NODE=.* is not a SLURM count list"):
        expand_counts(text, "SLURM_TASKS_PER_NODE")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, 1, id="step-layout-last-node"),
        pytest.param({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "0"}, 2, id="step-layout-first-node"),
        pytest.param(
            {
                "SLURM_STEP_TASKS_PER_NODE": "1",
                "SLURM_TASKS_PER_NODE": "4",
                "SLURM_NTASKS_PER_NODE": "4",
                "SLURM_NODEID": "0",
            },
            1,
            id="step-wins-over-job",
        ),
        pytest.param({"SLURM_TASKS_PER_NODE": "3(x2)", "SLURM_NODEID": "1"}, 3, id="job-layout"),
        pytest.param(
            {"SLURM_NTASKS_PER_NODE": "4", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2"}, 4, id="requested-per-node"
        ),
        pytest.param({"SLURM_NODEID": "0"}, None, id="unknown"),
    ],
)
def test_processes_per_node(monkeypatch: pytest.MonkeyPatch, values: dict[str, str], expected: int | None) -> None:
    assert env_with(monkeypatch, values).processes_per_node() == expected


def test_processes_per_node_node_outside_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_with(monkeypatch, {"SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "1"})
    with pytest.raises(MisconfigurationError, match=r"SLURM_NODEID=1, but SLURM_STEP_TASKS_PER_NODE lists only 1"):
        env.processes_per_node()


# -- main address ------------------------------------------------------------------------------


def test_main_address_is_the_first_node_of_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_with(monkeypatch, TWO_NODES).main_address == "rack1-node01"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({"SLURM_JOB_NODELIST": "node[007-009]"}, "node007", id="job-nodelist"),
        pytest.param({"SLURM_NODELIST": "a,b"}, "a", id="old-nodelist"),
        pytest.param(
            {"SLURM_STEP_NODELIST": "gpu[3-4]", "SLURM_JOB_NODELIST": "gpu[1-4]"},
            "gpu3",
            id="concurrent-step-on-other-nodes",
        ),
        pytest.param({"SLURM_STEP_NODELIST": "gpu[3-4]", "MASTER_ADDR": "10.0.0.1"}, "10.0.0.1", id="master-addr-wins"),
    ],
)
def test_main_address(monkeypatch: pytest.MonkeyPatch, values: dict[str, str], expected: str) -> None:
    assert env_with(monkeypatch, values).main_address == expected


def test_main_address_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MisconfigurationError, match=r"needs the node list.*set MASTER_ADDR"):
        _ = env_with(monkeypatch, {"SLURM_JOB_ID": "1"}).main_address
    with pytest.raises(MisconfigurationError, match=r"SLURM_STEP_NODELIST: Invalid SLURM hostlist 'n\[1-'"):
        _ = env_with(monkeypatch, {"SLURM_STEP_NODELIST": "n[1-"}).main_address


# -- main port ---------------------------------------------------------------------------------


def test_port_depends_on_job_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    step0 = env_with(monkeypatch, {**TWO_NODES, "SLURM_STEP_ID": "0"}).main_port
    step1 = env_with(monkeypatch, {**TWO_NODES, "SLURM_STEP_ID": "1"}).main_port
    assert step0 != step1
    assert step0 == derive_port(123456789, 0)


def test_every_step_of_a_job_gets_its_own_port() -> None:
    for job in (1, 12, 4242, 123456789, 2**32 - 1):
        ports = [derive_port(job, step) for step in range(PORT_SPAN)]
        assert len(set(ports)) == PORT_SPAN


def test_ports_stay_below_the_ephemeral_range() -> None:
    ports = {derive_port(job, step) for job in range(0, 200_000, 7) for step in (0, 1, 2, BATCH_STEP_ID)}
    assert min(ports) >= PORT_BASE >= 1024
    assert max(ports) < PORT_BASE + PORT_SPAN <= 32768  # Linux's ip_local_port_range starts at 32768


def test_jobs_that_collide_in_lightning_do_not_collide_here() -> None:
    """Lightning: 15000 + last 4 digits of the job id, so jobs 10000 apart share a port."""
    assert derive_port(12345, 0) != derive_port(22345, 0)
    assert len({derive_port(job, 0) for job in range(100_000, 100_000 + PORT_SPAN)}) == PORT_SPAN


def test_batch_script_port_differs_from_its_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = env_with(monkeypatch, {"SLURM_JOB_ID": "77"}).main_port
    assert batch == derive_port(77, BATCH_STEP_ID) != derive_port(77, 0)


def test_master_port_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_with(monkeypatch, {**TWO_NODES, "MASTER_PORT": "29400"}).main_port == 29400


@pytest.mark.parametrize("value", ["abc", "0", "70000", "-1"])
def test_bad_master_port(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(MisconfigurationError, match=rf"MASTER_PORT='{value}' is not a port number"):
        _ = env_with(monkeypatch, {**TWO_NODES, "MASTER_PORT": value}).main_port


# -- validate_settings -------------------------------------------------------------------------


def test_validate_accepts_what_slurm_started(monkeypatch: pytest.MonkeyPatch) -> None:
    env_with(monkeypatch, TWO_NODES).validate_settings(4, 2)


def test_validate_accepts_ntasks_without_ntasks_per_node_when_even(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sbatch --nodes=2 --ntasks=8``: Lightning rejects it; SLURM spreads it 4 + 4, which is fine."""
    values = {k: v for k, v in TWO_NODES.items() if k != "SLURM_NTASKS_PER_NODE"}
    env_with(monkeypatch, values).validate_settings(4, 2)


@pytest.mark.parametrize(
    ("values", "devices", "nodes", "message"),
    [
        pytest.param(
            {**SRUN_TASK, "SLURM_NTASKS_PER_NODE": "2"},
            4,
            1,
            r"devices=4, but SLURM started 2 task\(s\) on this node \(--ntasks-per-node=2\)\. "
            r"Hint: Trainer\(devices=2\) or devices=\"auto\", or start 4 tasks per node: "
            r"sbatch --ntasks-per-node=4\.",
            id="devices",
        ),
        pytest.param(
            SRUN_TASK,
            1,
            1,
            r"devices=1, but SLURM started 2 task\(s\) on this node \(--ntasks=2 over 1 "
            r"node\(s\)\)",
            id="devices-with-ntasks",
        ),
        pytest.param(
            {**SRUN_TASK, "SLURM_NTASKS_PER_NODE": "4"},
            4,
            1,
            r"devices=4, but SLURM started 2 task\(s\) on this node \(--ntasks=2 over 1 node\(s\)\)",
            id="step-smaller-than-the-job",
        ),
        pytest.param(
            SRUN_TASK,
            2,
            2,
            r"num_nodes=2, but SLURM runs this step on 1 node\(s\) \(--nodes=1\)\. "
            r"Hint: Trainer\(num_nodes=1\), or sbatch --nodes=2\.",
            id="nodes",
        ),
        pytest.param(
            {**TWO_NODES, "SLURM_NTASKS": "7", "SLURM_STEP_TASKS_PER_NODE": "4,3", "SLURM_NTASKS_PER_NODE": ""},
            4,
            2,
            r"SLURM placed the 7 tasks of this step unevenly over 2 nodes \(SLURM_STEP_TASKS_PER_NODE=4,3: "
            r"4, 3\).*Hint: use sbatch --nodes=N --ntasks-per-node=M instead of --ntasks=7",
            id="uneven",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2"},
            2,
            1,
            r"SLURM allocated 2 tasks, but this process is not one of them.*srun python train.py",
            id="batch-script",
        ),
        pytest.param(
            {"SLURM_JOB_ID": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "3"},
            2,
            1,
            r"devices=2 × num_nodes=1 is 2 processes, but SLURM started 3 tasks",
            id="world-size",
        ),
    ],
)
def test_validate_errors_use_the_users_words(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], devices: int, nodes: int, message: str
) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        env_with(monkeypatch, values).validate_settings(devices, nodes)


# -- construction ------------------------------------------------------------------------------


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    env = SLURMEnvironment()
    assert (env.auto_requeue, env.requeue_signal, env.checkpoint_on_sigterm) == (True, signal.SIGUSR1, True)
    assert repr(env) == "SLURMEnvironment(auto_requeue=True, requeue_signal=SIGUSR1)"


@pytest.mark.parametrize("value", [signal.SIGUSR2, int(signal.SIGUSR2), "USR2", "SIGUSR2", "sigusr2", "12"])
def test_requeue_signal_forms(value: object) -> None:
    assert SLURMEnvironment(requeue_signal=value).requeue_signal == signal.SIGUSR2  # type: ignore[arg-type]


def test_requeue_signal_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_SLURM_REQUEUE_SIGNAL", "USR2")
    assert SLURMEnvironment().requeue_signal == signal.SIGUSR2
    assert SLURMEnvironment(requeue_signal="HUP").requeue_signal == signal.SIGHUP  # the argument wins


def test_bad_requeue_signal_names_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"requeue_signal='USR9' is not a signal.*'USR1' or 'SIGUSR2'"):
        SLURMEnvironment(requeue_signal="USR9")
    monkeypatch.setenv("TORCHPLUG_SLURM_REQUEUE_SIGNAL", "nope")
    with pytest.raises(ValueError, match=r"TORCHPLUG_SLURM_REQUEUE_SIGNAL='nope' is not a signal"):
        SLURMEnvironment()


@pytest.mark.parametrize(
    ("value", "expected"), [("0", False), ("false", False), ("off", False), ("1", True), ("yes", True)]
)
def test_auto_requeue_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("TORCHPLUG_SLURM_AUTO_REQUEUE", value)
    assert SLURMEnvironment().auto_requeue is expected
    assert SLURMEnvironment(auto_requeue=True).auto_requeue is True


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TORCHPLUG_SLURM_AUTO_REQUEUE", "maybe", "TORCHPLUG_SLURM_AUTO_REQUEUE='maybe' is not a boolean. Hint: use"),
        ("TORCHPLUG_SLURM_REQUEUE_SIGNAL", "nope", "TORCHPLUG_SLURM_REQUEUE_SIGNAL='nope' is not a signal"),
        ("TORCHPLUG_SLURM_SCONTROL", "/no/such/scontrol", "TORCHPLUG_SLURM_SCONTROL='/no/such/scontrol' is not an"),
    ],
    ids=["auto-requeue", "signal", "scontrol"],
)
def test_a_bad_variable_is_refused_when_the_environment_is_made(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        SLURMEnvironment()
    assert str(info.value).startswith(message)


def test_scontrol_is_not_checked_when_requeueing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_SLURM_SCONTROL", "/no/such/scontrol")
    assert SLURMEnvironment(auto_requeue=False).auto_requeue is False
