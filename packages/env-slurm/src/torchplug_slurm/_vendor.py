"""env-slurm's vendor boundary: SLURM's ``scontrol`` tool, and the ``core env`` report.

SLURM has no Python library: what this package uses of it is its variables (read in
``_variables.py``) and the ``scontrol`` command, run here.

``scontrol requeue <job id>`` runs without a shell, for a job id that is digits and nothing
else: the id must match completely, the command is an argument list, there is no retry through a
shell, and every failure raises :class:`RequeueError` with what happened and what to do.

The report (:func:`environment_report`) is this package's section of ``core env``: what
detection sees here, the settings, where ``scontrol`` is, and the ``SLURM_*`` variables that matter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any, Final

__all__ = [
    "SCONTROL_VAR",
    "RequeueError",
    "environment_report",
    "requeue_command",
    "requeue_job",
    "scontrol_from_env",
]

#: Path of the ``scontrol`` to use, for containers where it is not on ``PATH``.
SCONTROL_VAR: Final = "TORCHPLUG_SLURM_SCONTROL"

_JOB_ID_RE: Final = re.compile(r"[0-9]+(?:_[0-9]+)?")
_TIMEOUT: Final = 60.0


class RequeueError(RuntimeError):
    """The job could not be requeued; the message says why and how to fix it."""


def scontrol_from_env() -> str | None:
    """``$TORCHPLUG_SLURM_SCONTROL`` when set: the ``scontrol`` program to run (a path, or a name on PATH).

    Raises:
        SettingsError: It is set, but names no executable file.
    """
    value = os.environ.get(SCONTROL_VAR, "").strip()
    if not value:
        return None
    if shutil.which(value) is None:
        from torchplug import SettingsError

        raise SettingsError(
            f"{SCONTROL_VAR}={value!r} is not an executable file. Allowed: the path of SLURM's scontrol "
            f"(or a program name on PATH); unset {SCONTROL_VAR} to use the scontrol on PATH."
        )
    return value


def requeue_command(job_id: str, scontrol: str | None = None) -> list[str]:
    """The argument list that requeues ``job_id``: ``[<scontrol>, "requeue", job_id]``.

    Args:
        job_id: ``123``, or ``123_4`` for a task of an array job.
        scontrol: The program; default ``$TORCHPLUG_SLURM_SCONTROL``, else ``scontrol`` on ``PATH``.

    Raises:
        RequeueError: The id is not digits, or ``scontrol`` cannot be found.
        SettingsError: ``$TORCHPLUG_SLURM_SCONTROL`` is set but names no executable file.
    """
    if not isinstance(job_id, str) or _JOB_ID_RE.fullmatch(job_id) is None:
        raise RequeueError(
            f"Refusing to run scontrol requeue with the job id {job_id!r}: a SLURM job id is digits "
            "('123', or '123_4' for an array task)."
        )
    program = scontrol or scontrol_from_env() or shutil.which("scontrol")
    if not program:
        raise RequeueError(
            f"Cannot requeue SLURM job {job_id}: the scontrol command is not on PATH. This happens in "
            f"containers that do not ship the SLURM client. Hint: make scontrol available inside the container "
            f"(install or bind-mount it), or point {SCONTROL_VAR} at it."
        )
    return [program, "requeue", job_id]


def requeue_job(job_id: str, scontrol: str | None = None, timeout: float = _TIMEOUT) -> str:
    """Run ``scontrol requeue job_id`` (no shell) and return what it printed.

    Raises:
        RequeueError: The id is invalid, ``scontrol`` is missing or cannot run, it timed out, or it
            exited non-zero (the message holds its output and a hint).
    """
    argv = requeue_command(job_id, scontrol)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RequeueError(f"Cannot requeue SLURM job {job_id}: running {argv} failed: {exc}") from exc
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise RequeueError(
            f"Cannot requeue SLURM job {job_id}: {' '.join(argv)} exited with code {result.returncode}: "
            f"{output or '(no output)'}. {_hint(output)}"
        )
    return output


def _hint(output: str) -> str:
    text = output.lower()
    if "disabled" in text or "not requeue" in text:
        return "Hint: submit the job with sbatch --requeue (the cluster may have JobRequeue=0)."
    if "batch" in text:
        return "Hint: only batch jobs can be requeued: submit the script with sbatch and start the training with srun."
    if "permission" in text or "denied" in text:
        return "Hint: a job can only be requeued by its owner or an operator."
    return "Hint: see `scontrol requeue` in `man scontrol`; the preemption checkpoint was written and can be resumed."


# -- the core env report ------------------------------------------------------------------

#: The SLURM variables worth pasting into a bug report (no user names, no paths).
_VARIABLES: Final = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_STEP_ID",
    "SLURM_JOB_NAME",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NUM_NODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_RESTART_COUNT",
    "SLURM_PTY_PORT",
    "SLURM_TASK_PID",
)


def environment_report() -> dict[str, Any]:
    """Detection, the package's switches, ``scontrol``'s location and the ``SLURM_*`` variables that matter."""
    from torchplug_slurm.environment import ENV_VARS, SLURMEnvironment  # it imports this module

    return {
        "detected": SLURMEnvironment.detect(),
        "reason": SLURMEnvironment.detect_reason(),
        "settings": {name: os.environ.get(name) for name in ENV_VARS},
        "scontrol": os.environ.get(SCONTROL_VAR) or shutil.which("scontrol"),
        "variables": {name: os.environ[name] for name in _VARIABLES if name in os.environ},
    }
