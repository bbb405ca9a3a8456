"""What SLURM tells a process through its ``SLURM_*`` variables, read once into a typed snapshot.

Reading never writes ``os.environ``. Every malformed value raises an error that names the
variable and its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from torchplug import MisconfigurationError

__all__ = ["BATCH_STEP_ID", "INTERACTIVE_STEP_ID", "MAX_NORMAL_STEP_ID", "SlurmVariables", "expand_counts"]

#: Step ids above this are SLURM's special steps, not ``srun`` steps (``slurm.h``).
MAX_NORMAL_STEP_ID: Final = 0xFFFFFFF0
#: The step id of ``salloc``'s interactive step (``LaunchParameters=use_interactive_step``).
INTERACTIVE_STEP_ID: Final = 0xFFFFFFFA
#: The step id of the batch script.
BATCH_STEP_ID: Final = 0xFFFFFFFB

_COUNT_RE: Final = re.compile(r"(\d+)(?:\(x(\d+)\))?")
_JOB_KEY_RE: Final = re.compile(r"[0-9]+(?:_[0-9]+)?")


def expand_counts(text: str, variable: str = "value") -> list[int]:
    """Expand SLURM's compressed count list: ``"2(x3),1"`` → ``[2, 2, 2, 1]``.

    Args:
        text: The value of ``SLURM_TASKS_PER_NODE``, ``SLURM_STEP_TASKS_PER_NODE`` or
            ``SLURM_JOB_CPUS_PER_NODE``.
        variable: The variable's name, for the error message.

    Raises:
        MisconfigurationError: An item is not ``N`` or ``N(xM)``.
    """
    counts: list[int] = []
    for item in text.split(","):
        match = _COUNT_RE.fullmatch(item.strip())
        if match is None:
            raise MisconfigurationError(
                f"{variable}={text!r} is not a SLURM count list: expected items like '2' or '2(x3)' "
                f"separated by commas, got {item!r}."
            )
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


@dataclass(frozen=True, slots=True)
class SlurmVariables:
    """A read-only view of the ``SLURM_*`` variables of one process.

    Attributes:
        environ: Where the variables are read (``os.environ`` by default).
    """

    environ: Mapping[str, str]

    @classmethod
    def current(cls) -> SlurmVariables:
        """The variables of this process."""
        return cls(os.environ)

    def text(self, *names: str) -> str | None:
        """The first of ``names`` that is set (and not empty), or None."""
        for name in names:
            value = self.environ.get(name, "").strip()
            if value:
                return value
        return None

    def integer(self, *names: str, default: int | None = None) -> int:
        """The first of ``names`` that is set, as an int; ``default`` when none is.

        Raises:
            MisconfigurationError: None is set and there is no default, or the value is not an int.
        """
        for name in names:
            value = self.environ.get(name, "").strip()
            if value:
                try:
                    return int(value)
                except ValueError:
                    raise MisconfigurationError(f"{name}={value!r} is not an integer.") from None
        if default is None:
            raise MisconfigurationError(
                f"{names[0]} is not set: this process was not started by SLURM as a task of a job step. "
                "Hint: start it with srun (srun python train.py), also inside an sbatch script."
            )
        return default

    # -- the job ------------------------------------------------------------------------------

    @property
    def job_id(self) -> str | None:
        """``SLURM_JOB_ID`` (or the older ``SLURM_JOBID``)."""
        return self.text("SLURM_JOB_ID", "SLURM_JOBID")

    @property
    def job_key(self) -> str | None:
        """The id that names the job to ``scontrol``: ``<array job id>_<task id>`` for an array task.

        Raises:
            MisconfigurationError: The id is not digits (``123`` or ``123_4``).
        """
        array_job, task = self.text("SLURM_ARRAY_JOB_ID"), self.text("SLURM_ARRAY_TASK_ID")
        key = f"{array_job}_{task}" if array_job and task else self.job_id
        if key is not None and _JOB_KEY_RE.fullmatch(key) is None:
            raise MisconfigurationError(
                f"The SLURM job id {key!r} (from SLURM_JOB_ID or SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID) is not "
                "digits, as SLURM job ids are ('123', or '123_4' for an array task)."
            )
        return key

    @property
    def job_name(self) -> str | None:
        """``SLURM_JOB_NAME``."""
        return self.text("SLURM_JOB_NAME")

    @property
    def restart_count(self) -> int:
        """``SLURM_RESTART_COUNT``: how often the job was requeued (0 when the variable is absent)."""
        return self.integer("SLURM_RESTART_COUNT", default=0)

    # -- the step and this task ---------------------------------------------------------------

    @property
    def step_id(self) -> int | None:
        """``SLURM_STEP_ID`` (or ``SLURM_STEPID``): None outside a job step (a batch script, a salloc shell)."""
        if self.text("SLURM_STEP_ID", "SLURM_STEPID") is None:
            return None
        return self.integer("SLURM_STEP_ID", "SLURM_STEPID")

    @property
    def num_tasks(self) -> int:
        """``SLURM_NTASKS`` (or ``SLURM_NPROCS``): the tasks of this step (1 when neither is set)."""
        return self.integer("SLURM_NTASKS", "SLURM_NPROCS", default=1)

    @property
    def nodelist(self) -> tuple[str, str] | None:
        """``(variable, hostlist)`` of this step's nodes: the step's list first, then the job's."""
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            value = self.text(name)
            if value is not None:
                return name, value
        return None

    @property
    def num_nodes(self) -> int | None:
        """The nodes of this step (``SLURM_STEP_NUM_NODES``, else the job's), or None when not set."""
        if self.text("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES") is None:
            return None
        return self.integer("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")

    @property
    def tasks_per_node(self) -> tuple[str, list[int]] | None:
        """``(variable, counts)``: the tasks SLURM placed on each node of this step, or None.

        Read from the step's layout (``SLURM_STEP_TASKS_PER_NODE``), else the job's
        (``SLURM_TASKS_PER_NODE``), else the requested ``SLURM_NTASKS_PER_NODE`` for every node.
        """
        for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
            value = self.text(name)
            if value is not None:
                return name, expand_counts(value, name)
        if self.text("SLURM_NTASKS_PER_NODE") is not None:
            per_node = self.integer("SLURM_NTASKS_PER_NODE")
            return "SLURM_NTASKS_PER_NODE", [per_node] * (self.num_nodes or 1)
        return None

    @property
    def pty(self) -> bool:
        """Whether the step runs under a pseudo-terminal (``srun --pty``, salloc's interactive step)."""
        return self.text("SLURM_PTY_PORT") is not None

    @property
    def task_pid(self) -> int | None:
        """``SLURM_TASK_PID``: the process SLURM started as the task (None when not set or not a number)."""
        value = self.text("SLURM_TASK_PID")
        return int(value) if value is not None and value.isdigit() else None
