"""Where the ranks of a SLURM job step meet: the main address and a port derived from the job and step ids.

Every task of a step computes the same answer from its own variables; nothing is exchanged and
nothing is written to ``os.environ``.

The port
    ``MASTER_PORT`` when set. Otherwise ``PORT_BASE + (job_id * 97 + step_id) % PORT_SPAN``, a port
    in 20000–31999: below Linux's ephemeral range (32768–60999, where the kernel picks the local
    ports of outgoing connections, including SLURM's own ``srun`` ports) and above the well-known
    and most registered services. Two steps of one job never share a port (unless their step ids
    differ by a multiple of 12000), so concurrent ``srun`` steps in one allocation do not collide,
    and neither do the first steps of any two jobs whose ids differ by less than 12000.
"""

from __future__ import annotations

from typing import Final

from torchplug import MisconfigurationError
from torchplug_slurm._hostlist import HostlistError, first_host
from torchplug_slurm._variables import BATCH_STEP_ID, SlurmVariables

__all__ = ["PORT_BASE", "PORT_SPAN", "derive_port", "main_address", "main_port"]

#: The lowest derived port.
PORT_BASE: Final = 20000
#: How many ports the derivation spreads over (20000–31999).
PORT_SPAN: Final = 12000
#: Spreads consecutive job ids apart, so that step 1 of job n is not step 0 of job n + 1.
_JOB_STRIDE: Final = 97


def derive_port(job_id: int, step_id: int) -> int:
    """The rendezvous port of step ``step_id`` of job ``job_id`` (see the module docstring)."""
    return PORT_BASE + (job_id * _JOB_STRIDE + step_id) % PORT_SPAN


def main_port(variables: SlurmVariables) -> int:
    """``MASTER_PORT``, or the port derived from ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``.

    Outside a step (a batch script) the step id is SLURM's batch step id, so the script and its
    ``srun`` steps get different ports.

    Raises:
        MisconfigurationError: ``MASTER_PORT`` is not a port number, or there is no job id.
    """
    given = variables.text("MASTER_PORT")
    if given is not None:
        if not given.isdigit() or not 0 < int(given) < 65536:
            raise MisconfigurationError(f"MASTER_PORT={given!r} is not a port number (1-65535).")
        return int(given)
    job_id = variables.integer("SLURM_JOB_ID", "SLURM_JOBID")
    step_id = variables.step_id
    return derive_port(job_id, BATCH_STEP_ID if step_id is None else step_id)


def main_address(variables: SlurmVariables) -> str:
    """``MASTER_ADDR``, or the first node of the step (``SLURM_STEP_NODELIST``, else the job's nodelist).

    The step's own list comes first: concurrent steps of one job may run on different nodes, and
    task 0 of a step runs on the first node of that step.

    Raises:
        MisconfigurationError: No address is set and no nodelist either, or the nodelist is malformed.
    """
    given = variables.text("MASTER_ADDR")
    if given is not None:
        return given
    nodelist = variables.nodelist
    if nodelist is None:
        raise MisconfigurationError(
            "The SLURM environment needs the node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST) "
            "to find rank 0, but none is set. Hint: start the script with srun, or set MASTER_ADDR."
        )
    name, hostlist = nodelist
    try:
        return first_host(hostlist)
    except HostlistError as exc:
        raise MisconfigurationError(f"{name}: {exc} Hint: set MASTER_ADDR to rank 0's host.") from exc
