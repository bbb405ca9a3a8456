"""The ``slurm`` cluster environment: tasks started by ``srun``, with preemption and requeue.

Detection (pure: it reads variables, writes nothing, warns about nothing). This process is taken
for a SLURM task when all of these hold:

1. ``SLURM_JOB_ID`` is set (a job), and ``SLURM_STEP_ID`` is set and is a normal step id: the
   process belongs to a job step started by ``srun``. A ``salloc`` shell and a batch script have
   no step id (or, with ``LaunchParameters=use_interactive_step``, the special interactive step id
   4294967290): a Python started there is a single process, not one of the step's tasks.
2. ``SLURM_PROCID`` and ``SLURM_NTASKS`` are set (ranks can be read).
3. It is not an interactive shell started with ``srun --pty bash``: ``SLURM_PTY_PORT`` is set and
   this process is not the task itself (``SLURM_TASK_PID`` differs from its PID).
4. ``SLURM_JOB_NAME`` is not ``interactive`` or ``bash`` for a single-task step: the
   escape hatch ``srun --job-name=interactive`` keeps working. With several tasks the name is
   ignored: ``salloc`` names its jobs ``interactive``, so every ``srun -n2`` inside a ``salloc``
   would be missed, and several tasks that each train alone are never what was meant.

``TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS=slurm`` turns detection off (the core's switch);
``TORCHPLUG_CLUSTER_ENVIRONMENT=slurm`` uses this environment without asking.
"""

from __future__ import annotations

import os
import signal
import warnings
from typing import TYPE_CHECKING, ClassVar, Final

from typing_extensions import override

from torchplug import ClusterEnvironment, MisconfigurationError, SettingsError
from torchplug.environments import Evidence
from torchplug.utilities.env_vars import env_bool
from torchplug.utilities.rank_zero import log, rank_zero_warn
from torchplug_slurm._preemption import SignalWatch, parse_signal
from torchplug_slurm._rendezvous import main_address, main_port
from torchplug_slurm._variables import MAX_NORMAL_STEP_ID, SlurmVariables
from torchplug_slurm._vendor import SCONTROL_VAR, requeue_job, scontrol_from_env

if TYPE_CHECKING:
    from torchplug import CheckpointIO

__all__ = ["AUTO_REQUEUE_VAR", "ENV_VARS", "REQUEUE_SIGNAL_VAR", "SLURMEnvironment"]

#: ``0`` turns automatic requeueing off (as ``auto_requeue=False`` does), for auto-detected runs.
AUTO_REQUEUE_VAR: Final = "TORCHPLUG_SLURM_AUTO_REQUEUE"
#: The signal that asks for a checkpoint and a requeue when ``requeue_signal`` is not given.
REQUEUE_SIGNAL_VAR: Final = "TORCHPLUG_SLURM_REQUEUE_SIGNAL"

#: Every variable of this package, with what it does (for the README and diagnostics).
ENV_VARS: Final[dict[str, str]] = {
    AUTO_REQUEUE_VAR: "0 turns off the requeue signal handling (default 1)",
    REQUEUE_SIGNAL_VAR: "the requeue signal, a name (USR1, SIGUSR2) or a number (default USR1)",
    SCONTROL_VAR: "path of scontrol when it is not on PATH",
}

_INTERACTIVE_NAMES: Final = ("interactive", "bash")


class SLURMEnvironment(ClusterEnvironment):
    """Processes started by SLURM's ``srun``: one task per device, ranks from ``SLURM_PROCID`` and friends.

    Args:
        auto_requeue: Watch for ``requeue_signal`` during ``fit``: at the next step boundary the
            Trainer writes a checkpoint and rank 0 runs ``scontrol requeue``; the restarted job
            resumes from it. Default: ``$TORCHPLUG_SLURM_AUTO_REQUEUE`` (``0`` for off), else on.
        requeue_signal: The signal that announces preemption (``sbatch --signal=USR1@90``): a
            ``signal.Signals``, a number or a name. Default: ``$TORCHPLUG_SLURM_REQUEUE_SIGNAL``,
            else SIGUSR1.
        checkpoint_on_sigterm: While ``fit`` runs with ``auto_requeue``, a SIGTERM (``scancel``,
            preemption, the time limit) also writes the checkpoint at the next step boundary,
            without ``scontrol requeue`` (SLURM is ending or requeueing the job itself); then the
            SIGTERM is delivered again and ends the process. See :mod:`torchplug_slurm._preemption`.

    Raises:
        ValueError: ``requeue_signal`` is not a signal.
        SettingsError: ``$TORCHPLUG_SLURM_AUTO_REQUEUE`` is not a boolean,
            ``$TORCHPLUG_SLURM_REQUEUE_SIGNAL`` is not a signal (a ``ValueError`` too), or
            ``$TORCHPLUG_SLURM_SCONTROL`` names no executable file while requeueing is on.
    """

    detect_priority: ClassVar[int] = 90

    def __init__(
        self,
        auto_requeue: bool | None = None,
        requeue_signal: int | str | signal.Signals | None = None,
        checkpoint_on_sigterm: bool = True,
    ) -> None:
        if auto_requeue is None:
            auto_requeue = env_bool(AUTO_REQUEUE_VAR, True)
        if auto_requeue:
            scontrol_from_env()  # checked now, not when the preemption signal arrives
        self.auto_requeue = auto_requeue
        if requeue_signal is not None:
            self.requeue_signal = parse_signal(requeue_signal, "requeue_signal")
        else:
            self.requeue_signal = _signal_from_env()
        self.checkpoint_on_sigterm = checkpoint_on_sigterm
        self._watch: SignalWatch | None = None

    # -- detection ----------------------------------------------------------------------------

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Whether this process is a task of a SLURM job step (see the module docstring), and what says so."""
        return _evidence(SlurmVariables.current(), os.getpid())

    # -- ranks and rendezvous -----------------------------------------------------------------

    @property
    def _vars(self) -> SlurmVariables:
        return SlurmVariables.current()

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: ``srun`` started every task; torchplug must not start more."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the first node of ``SLURM_STEP_NODELIST`` (then the job's nodelist)."""
        return main_address(self._vars)

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT``, else a port derived from the job and step ids (:mod:`torchplug_slurm._rendezvous`)."""
        return main_port(self._vars)

    @override
    def world_size(self) -> int:
        """``SLURM_NTASKS``: the tasks of this step."""
        return self._vars.num_tasks

    @override
    def global_rank(self) -> int:
        """``SLURM_PROCID``."""
        return self._vars.integer("SLURM_PROCID")

    @override
    def local_rank(self) -> int:
        """``SLURM_LOCALID``."""
        return self._vars.integer("SLURM_LOCALID")

    @override
    def node_rank(self) -> int:
        """``SLURM_NODEID``."""
        return self._vars.integer("SLURM_NODEID")

    @override
    def set_world_size(self, size: int) -> None:
        """Ignored: SLURM decides (``validate_settings`` reports a disagreement)."""

    @override
    def set_global_rank(self, rank: int) -> None:
        """Ignored: SLURM decides."""

    @override
    def processes_per_node(self) -> int | None:
        """The tasks SLURM placed on this node (from the step's ``SLURM_STEP_TASKS_PER_NODE``, ``"2(x3),1"``)."""
        layout = self._vars.tasks_per_node
        if layout is None:
            return None
        name, counts = layout
        node = self.node_rank() if self._vars.text("SLURM_NODEID") else 0
        if node >= len(counts):
            raise MisconfigurationError(f"SLURM_NODEID={node}, but {name} lists only {len(counts)} node(s): {counts}.")
        return counts[node]

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check ``devices=`` and ``num_nodes=`` against what SLURM started, with a hint in SLURM's words.

        ``--ntasks`` without ``--ntasks-per-node`` is fine when SLURM spreads the tasks evenly.

        Raises:
            MisconfigurationError: This process is not one of the step's tasks, the tasks are spread
                unevenly, or ``devices``/``num_nodes`` differ from the tasks per node and the nodes.
        """
        variables = self._vars
        tasks = variables.num_tasks
        if tasks > 1 and not _in_step(variables):
            raise MisconfigurationError(
                f"SLURM allocated {tasks} tasks, but this process is not one of them (SLURM_STEP_ID is not set: a "
                "batch script or a salloc shell). Hint: start the training with srun: srun python train.py."
            )
        layout = variables.tasks_per_node
        nodes = variables.num_nodes or (len(layout[1]) if layout else 1)
        if layout is not None and len(set(layout[1])) > 1:
            name, counts = layout
            raise MisconfigurationError(
                f"SLURM placed the {tasks} tasks of this step unevenly over {len(counts)} nodes "
                f"({name}={variables.text(name)}: {', '.join(map(str, counts))}); torchplug needs the same number "
                f"on every node. Hint: use sbatch --nodes=N --ntasks-per-node=M instead of --ntasks={tasks}."
            )
        _check_devices(self.processes_per_node(), num_devices, variables)
        _check_nodes(nodes, num_nodes)
        if num_devices * num_nodes != tasks:
            raise MisconfigurationError(
                f"devices={num_devices} × num_nodes={num_nodes} is {num_devices * num_nodes} processes, but SLURM "
                f"started {tasks} tasks (SLURM_NTASKS={tasks}). Hint: make devices × num_nodes equal --ntasks."
            )

    # -- preemption ---------------------------------------------------------------------------

    @override
    def setup_preemption(self) -> bool:
        """Install the handlers (requeue signal, SIGTERM), which only set flags; False with ``auto_requeue=False``."""
        if not self.auto_requeue:
            return False
        defer = (signal.SIGTERM,) if self.checkpoint_on_sigterm else ()
        watch = SignalWatch((self.requeue_signal,), defer)
        if not watch.install():
            warnings.warn(
                f"SLURM auto-requeue is off: {self.requeue_signal.name} handlers can only be installed on the main "
                "thread, and fit() runs on another one. Hint: call fit() from the main thread.",
                stacklevel=2,
            )
            return False
        self._watch = watch
        return True

    @override
    def preemption_requested(self) -> bool:
        """Whether the requeue signal (or a deferred SIGTERM) arrived: a flag read."""
        return self._watch is not None and self._watch.requested

    @override
    def preemption_checkpoint_path(self, root_dir: str) -> str:
        """``<root_dir>/hpc_ckpt_<job id>.ckpt`` (``<array job id>_<task id>`` for an array task)."""
        key = self._vars.job_key
        if key is None:
            return super().preemption_checkpoint_path(root_dir)
        return f"{root_dir.rstrip('/')}/hpc_ckpt_{key}.ckpt"

    @override
    def requeue(self) -> None:
        """Run ``scontrol requeue <job id>`` (no shell), unless only a SIGTERM arrived (SLURM ends the job itself).

        Raises:
            RequeueError: ``scontrol`` is missing or failed; the message says why, with a hint.
            MisconfigurationError: There is no job id (not a SLURM job).
        """
        watch = self._watch
        if watch is not None and watch.received(signal.SIGTERM) and not watch.received(self.requeue_signal):
            log.info("SIGTERM received: checkpoint written; SLURM ends or requeues the job itself, no scontrol call.")
            return
        key = self._vars.job_key
        if key is None:
            raise MisconfigurationError("Cannot requeue: SLURM_JOB_ID is not set (this is not a SLURM job).")
        output = requeue_job(key)
        log.info("Requeued SLURM job %s%s", key, f": {output}" if output else "")

    @override
    def restart_count(self) -> int:
        """``SLURM_RESTART_COUNT``: how often SLURM requeued the job (above 0, fit resumes as with ckpt_path="auto")."""
        return self._vars.restart_count

    @override
    def resume_checkpoint_path(self, root_dir: str, checkpoint_io: CheckpointIO) -> str | None:
        """The preemption checkpoint, when SLURM restarted this job (``SLURM_RESTART_COUNT`` > 0) and it exists.

        The restart count matters, not only the file: job ids start again at 1 on a reinstalled
        cluster, and a new job must not resume an old job's checkpoint of the same id.
        """
        variables = self._vars
        if variables.restart_count < 1 or variables.job_key is None:
            return None
        path = self.preemption_checkpoint_path(root_dir)
        if checkpoint_io.exists(path):
            log.info("SLURM restart %d of job %s: resuming from %s", variables.restart_count, variables.job_key, path)
            return path
        rank_zero_warn(
            f"SLURM restarted job {variables.job_key} (SLURM_RESTART_COUNT={variables.restart_count}), "
            f"but there is no preemption checkpoint at {path}: training starts from the beginning."
        )
        return None

    @override
    def teardown_preemption(self) -> None:
        """Restore the previous handlers; a SIGTERM held back meanwhile is delivered now."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.uninstall()

    @override
    def __repr__(self) -> str:
        return f"SLURMEnvironment(auto_requeue={self.auto_requeue}, requeue_signal={self.requeue_signal.name})"


def _in_step(variables: SlurmVariables) -> bool:
    step = variables.step_id
    return step is not None and 0 <= step < MAX_NORMAL_STEP_ID


def _evidence(variables: SlurmVariables, pid: int) -> Evidence:
    """Whether this process is a task of a SLURM job step, and the variables that say so."""
    job = variables.job_id
    if job is None:
        return Evidence.absent("SLURM_JOB_ID not set")
    step = variables.text("SLURM_STEP_ID", "SLURM_STEPID")
    if step is None:
        return Evidence.absent(
            f"SLURM_JOB_ID={job} but SLURM_STEP_ID not set: a salloc shell or batch script, not an srun task"
        )
    if not step.isdigit() or not _in_step(variables):
        return Evidence.absent(
            f"SLURM_STEP_ID={step} is not an srun step (salloc's interactive step or another special one)"
        )
    missing = [name for name in ("SLURM_PROCID", "SLURM_NTASKS") if variables.text(name) is None]
    if missing:
        return Evidence.absent(f"SLURM_JOB_ID={job}, SLURM_STEP_ID={step}, but not {', '.join(missing)}")
    try:
        tasks = variables.num_tasks
    except MisconfigurationError as exc:
        return Evidence.absent(str(exc))
    evidence = f"SLURM_JOB_ID={job}, SLURM_STEP_ID={step}, SLURM_NTASKS={tasks}"
    if variables.pty and variables.task_pid not in (None, pid):
        return Evidence.absent(
            f"{evidence}, but a shell started with srun --pty (SLURM_PTY_PORT set, SLURM_TASK_PID is not us)"
        )
    name = variables.job_name
    if name in _INTERACTIVE_NAMES:
        if tasks == 1:
            return Evidence.absent(f"{evidence}, but SLURM_JOB_NAME={name} (an interactive job)")
        evidence += f"; SLURM_JOB_NAME={name} ignored with several tasks"
    return Evidence.found(evidence)


def _check_devices(per_node: int | None, num_devices: int, variables: SlurmVariables) -> None:
    if per_node is None or per_node == num_devices:
        return
    if variables.text("SLURM_NTASKS_PER_NODE") == str(per_node):
        option = f"--ntasks-per-node={per_node}"
    else:
        option = f"--ntasks={variables.num_tasks} over {variables.num_nodes or 1} node(s)"
    raise MisconfigurationError(
        f"devices={num_devices}, but SLURM started {per_node} task(s) on this node ({option}). "
        f'Hint: Trainer(devices={per_node}) or devices="auto", or start {num_devices} tasks per node: '
        f"sbatch --ntasks-per-node={num_devices}."
    )


def _check_nodes(nodes: int, num_nodes: int) -> None:
    if nodes == num_nodes:
        return
    raise MisconfigurationError(
        f"num_nodes={num_nodes}, but SLURM runs this step on {nodes} node(s) (--nodes={nodes}). "
        f"Hint: Trainer(num_nodes={nodes}), or sbatch --nodes={num_nodes}."
    )


def _signal_from_env() -> signal.Signals:
    """``$TORCHPLUG_SLURM_REQUEUE_SIGNAL``, else SIGUSR1; a value that is not a signal raises, naming the variable."""
    value = os.environ.get(REQUEUE_SIGNAL_VAR, "").strip() or "USR1"
    try:
        return parse_signal(value, REQUEUE_SIGNAL_VAR)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
