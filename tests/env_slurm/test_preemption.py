"""Preemption: real signals set a flag and nothing else; SIGTERM is held back; the resume path needs a restart.

Signals are sent to this very process with ``os.kill``; the SIGTERM cases run in a child
process, since the point is that the signal is delivered again and ends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.env_slurm.conftest import calls
from tests.env_slurm.test_detection import SRUN_TASK
from tests.environment_support import set_env
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug_slurm import SLURMEnvironment
from torchplug_slurm._preemption import SignalWatch, parse_signal


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> SLURMEnvironment:
    set_env(monkeypatch, SRUN_TASK)
    return SLURMEnvironment()


def test_signal_sets_only_a_flag(environment: SLURMEnvironment, fake_scontrol: Path, tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    files = set(tmp_path.rglob("*"))
    assert environment.setup_preemption() is True
    try:
        assert environment.preemption_requested() is False
        os.kill(os.getpid(), signal.SIGUSR1)
        assert environment.preemption_requested() is True
        assert calls(fake_scontrol) == []  # no scontrol run from the handler
        assert set(tmp_path.rglob("*")) == files  # and nothing written (no checkpoint, no log file)
    finally:
        environment.teardown_preemption()
    assert signal.getsignal(signal.SIGUSR1) is before


def test_configured_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SRUN_TASK)
    environment = SLURMEnvironment(requeue_signal=signal.SIGUSR2)
    environment.setup_preemption()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert environment.preemption_requested() is True
    finally:
        environment.teardown_preemption()


def test_flags_are_reset_by_the_next_setup(environment: SLURMEnvironment) -> None:
    environment.setup_preemption()
    os.kill(os.getpid(), signal.SIGUSR1)
    environment.teardown_preemption()
    environment.setup_preemption()
    try:
        assert environment.preemption_requested() is False
    finally:
        environment.teardown_preemption()


def test_previous_handler_is_chained_and_restored(environment: SLURMEnvironment) -> None:
    seen: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        seen.append(signum)

    original = signal.signal(signal.SIGUSR1, previous)
    try:
        environment.setup_preemption()
        os.kill(os.getpid(), signal.SIGUSR1)
        environment.teardown_preemption()
        assert seen == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, original)


def test_auto_requeue_off_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**SRUN_TASK, "TORCHPLUG_SLURM_AUTO_REQUEUE": "0"})
    environment = SLURMEnvironment()
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    assert environment.setup_preemption() is False
    assert {s: signal.getsignal(s) for s in before} == before
    environment.teardown_preemption()


def test_off_the_main_thread_it_warns_and_does_not_watch(environment: SLURMEnvironment) -> None:
    results: list[bool] = []

    def setup() -> None:
        with pytest.warns(UserWarning, match=r"auto-requeue is off: SIGUSR1 handlers can only be installed on the"):
            results.append(environment.setup_preemption())

    thread = threading.Thread(target=setup)
    thread.start()
    thread.join()
    assert results == [False]
    assert environment.preemption_requested() is False


def test_sigterm_is_held_back_then_delivered_again(tmp_path: Path) -> None:
    """A SIGTERM during fit asks for the checkpoint; teardown delivers it again and the process ends."""
    code = textwrap.dedent("""
        import os, signal
        from torchplug_slurm import SLURMEnvironment
        env = SLURMEnvironment()
        assert env.setup_preemption()
        os.kill(os.getpid(), signal.SIGTERM)
        print("still alive, checkpoint requested:", env.preemption_requested(), flush=True)
        env.requeue()  # only SIGTERM arrived: SLURM ends the job itself, no scontrol
        print("requeue skipped", flush=True)
        env.teardown_preemption()
        print("not reached", flush=True)
        """)
    result = _run_child(code, tmp_path)
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert result.stdout.splitlines() == ["still alive, checkpoint requested: True", "requeue skipped"]


def test_sigterm_with_its_own_handler_is_chained_not_delivered_again(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import os, signal
        from torchplug_slurm import SLURMEnvironment
        seen = []
        signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
        env = SLURMEnvironment()
        env.setup_preemption()
        os.kill(os.getpid(), signal.SIGTERM)
        env.teardown_preemption()
        print(seen == [signal.SIGTERM], env.preemption_requested(), flush=True)
        """)
    result = _run_child(code, tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, "True False"), result.stderr


def test_sigterm_left_alone_when_asked(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import signal
        from torchplug_slurm import SLURMEnvironment
        env = SLURMEnvironment(checkpoint_on_sigterm=False)
        env.setup_preemption()
        print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
        """)
    assert _run_child(code, tmp_path).stdout.strip() == "True"


def _run_child(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **SRUN_TASK, "PATH": str(tmp_path)}  # no scontrol: a call would fail loudly
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_signal_watch_unit() -> None:
    watch = SignalWatch([signal.SIGUSR2], defer=[signal.SIGUSR2])  # a signal in both lists is only notified
    assert watch.defer == ()
    assert not watch.installed
    assert watch.install()
    try:
        assert watch.installed
        os.kill(os.getpid(), signal.SIGUSR2)
        assert watch.received(signal.SIGUSR2) and watch.requested
    finally:
        watch.uninstall()
    assert not watch.installed


def test_parse_signal_error() -> None:
    with pytest.raises(ValueError, match=r"TORCHPLUG_SLURM_REQUEUE_SIGNAL=99999 is not a signal"):
        parse_signal(99999, "TORCHPLUG_SLURM_REQUEUE_SIGNAL")


# -- checkpoint path and resume ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "name"),
    [
        pytest.param({"SLURM_JOB_ID": "4242"}, "hpc_ckpt_4242.ckpt", id="job"),
        pytest.param(
            {"SLURM_JOB_ID": "4250", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "7"},
            "hpc_ckpt_4242_7.ckpt",
            id="array-task",
        ),
        pytest.param({}, "preemption.ckpt", id="no-job"),
    ],
)
def test_checkpoint_path(monkeypatch: pytest.MonkeyPatch, values: dict[str, str], name: str) -> None:
    set_env(monkeypatch, values)
    assert SLURMEnvironment().preemption_checkpoint_path("/runs/a/") == f"/runs/a/{name}"
    assert SLURMEnvironment().preemption_checkpoint_path("s3://bucket/run") == f"s3://bucket/run/{name}"


def test_checkpoint_path_refuses_a_strange_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {"SLURM_JOB_ID": "../../etc"})
    with pytest.raises(Exception, match=r"The SLURM job id '../../etc'.*is not digits"):
        SLURMEnvironment().preemption_checkpoint_path("/runs")


@pytest.mark.parametrize(
    ("restart_count", "exists", "resumes"),
    [
        pytest.param("1", True, True, id="restarted-with-checkpoint"),
        pytest.param("3", True, True, id="restarted-again"),
        pytest.param(None, True, False, id="first-run-ignores-a-stale-file-of-a-reused-id"),
        pytest.param("0", True, False, id="restart-count-zero"),
        pytest.param("1", False, False, id="restarted-without-checkpoint"),
    ],
)
def test_resume_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restart_count: str | None, exists: bool, resumes: bool
) -> None:
    set_env(monkeypatch, {**SRUN_TASK, "SLURM_PROCID": "0"})  # rank 0 warns
    if restart_count is not None:
        monkeypatch.setenv("SLURM_RESTART_COUNT", restart_count)
    environment = SLURMEnvironment()
    path = tmp_path / "hpc_ckpt_12.ckpt"
    if exists:
        path.write_bytes(b"checkpoint")
    if restart_count not in (None, "0") and not exists:
        with pytest.warns(UserWarning, match=r"SLURM restarted job 12 \(SLURM_RESTART_COUNT=1\), but there is no"):
            result = environment.resume_checkpoint_path(str(tmp_path), TorchCheckpointIO())
    else:
        result = environment.resume_checkpoint_path(str(tmp_path), TorchCheckpointIO())
    assert result == (str(path) if resumes else None)
