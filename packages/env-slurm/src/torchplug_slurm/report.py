"""The env-slurm section of ``core env``: what detection sees here, the settings, and the requeue tool."""

from __future__ import annotations

import os
import shutil
from typing import Any, Final

from torchplug_slurm.environment import ENV_VARS, SLURMEnvironment
from torchplug_slurm.requeue import SCONTROL_VAR

__all__ = ["environment_report"]

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
    return {
        "detected": SLURMEnvironment.detect(),
        "reason": SLURMEnvironment.detect_reason(),
        "settings": {name: os.environ.get(name) for name in ENV_VARS},
        "scontrol": os.environ.get(SCONTROL_VAR) or shutil.which("scontrol"),
        "variables": {name: os.environ[name] for name in _VARIABLES if name in os.environ},
    }
