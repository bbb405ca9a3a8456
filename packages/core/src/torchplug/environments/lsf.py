"""The ``lsf`` cluster environment: IBM Spectrum LSF jobs whose processes ``jsrun`` started.

Imports no torch.
"""

from __future__ import annotations

import os
import socket
from typing import ClassVar

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.environments._variables import read_int
from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence

__all__ = ["LSFEnvironment"]

#: Every one of these must be set for detection.
_REQUIRED = ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE")

#: Ports derived from the job id fall in [_PORT_BASE, _PORT_BASE + _PORT_SPAN): below Linux's
#: ephemeral range (32768 and up), so they do not collide with the OS's own outgoing ports.
_PORT_BASE = 10000
_PORT_SPAN = 20000
#: Spreads the elements of an array job (one LSB_JOBID, several LSB_JOBINDEX) over the range.
_INDEX_STRIDE = 7919

_HINT = "Hint: start the processes with `jsrun` inside an LSF job (bsub), which sets it."


class LSFEnvironment(ClusterEnvironment):
    """An IBM Spectrum LSF job whose processes were started by ``jsrun`` (for example on Summit).

    Ranks come from ``JSM_NAMESPACE_SIZE``, ``JSM_NAMESPACE_RANK`` and ``JSM_NAMESPACE_LOCAL_RANK``.
    The compute hosts are read, on first use, from the file ``LSB_DJOB_RANKFILE`` names (one line
    per slot); its first line is the launch node, which runs no training process, and is skipped.
    The first compute host is the rendezvous address; the node rank is this host's index among the
    distinct compute hosts, in file order. Nothing is written to ``os.environ``.

    The port is ``MASTER_PORT`` when set. Otherwise it is derived from the job: ``10000 +
    (LSB_JOBID + 7919 × LSB_JOBINDEX) % 20000``: 20000 consecutive job ids get distinct ports, the
    array index keeps concurrent elements of one array job apart, and the range stays below the
    OS's ephemeral ports.
    """

    detect_priority: ClassVar[int] = 80

    def __init__(self) -> None:
        self._hosts: list[str] | None = None

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Detected when the LSF and jsrun variables are set and the rankfile exists.

        The variables: ``LSB_JOBID``, ``LSB_DJOB_RANKFILE``, ``JSM_NAMESPACE_LOCAL_RANK`` and
        ``JSM_NAMESPACE_SIZE``. The rankfile is only checked for existence, not read.
        """
        missing = Evidence.unset(_REQUIRED)
        if missing is not None:
            return missing
        rankfile = os.environ["LSB_DJOB_RANKFILE"]
        if not os.path.isfile(rankfile):
            return Evidence.absent(f"LSB_DJOB_RANKFILE={rankfile} is not a file")
        return Evidence.found(
            f"LSB_JOBID={os.environ['LSB_JOBID']}, JSM_NAMESPACE_SIZE={os.environ['JSM_NAMESPACE_SIZE']}"
        )

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: jsrun started every process; torchplug must not spawn more."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """The first compute host in ``LSB_DJOB_RANKFILE`` (the launch node on its first line skipped).

        Raises:
            RuntimeError: The rankfile is not set, cannot be read, or lists no compute host.
        """
        return self._compute_hosts()[0]

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT`` when set, else a port derived from ``LSB_JOBID`` and ``LSB_JOBINDEX`` (see the class).

        Raises:
            RuntimeError: ``MASTER_PORT`` or ``LSB_JOBID`` is not an integer.
        """
        if "MASTER_PORT" in os.environ:
            return _read_int("MASTER_PORT")
        job_id = _read_int("LSB_JOBID")
        index = _read_int("LSB_JOBINDEX") if os.environ.get("LSB_JOBINDEX") else 0
        return _PORT_BASE + (job_id + _INDEX_STRIDE * index) % _PORT_SPAN

    @override
    def world_size(self) -> int:
        """``JSM_NAMESPACE_SIZE``: the number of processes jsrun started."""
        return _read_int("JSM_NAMESPACE_SIZE")

    @override
    def global_rank(self) -> int:
        """``JSM_NAMESPACE_RANK``: this process's rank among all processes."""
        return _read_int("JSM_NAMESPACE_RANK")

    @override
    def local_rank(self) -> int:
        """``JSM_NAMESPACE_LOCAL_RANK``: this process's rank on its node."""
        return _read_int("JSM_NAMESPACE_LOCAL_RANK")

    @override
    def node_rank(self) -> int:
        """This host's index among the distinct compute hosts of ``LSB_DJOB_RANKFILE``, in file order.

        The host name (``socket.gethostname()``) is matched exactly, else by its short name (the
        part before the first dot) on either side.

        Raises:
            RuntimeError: The rankfile cannot be read, or does not list this host.
        """
        hosts = list(dict.fromkeys(self._compute_hosts()))
        hostname = socket.gethostname()
        if hostname in hosts:
            return hosts.index(hostname)
        short = [host.split(".")[0] for host in hosts]
        if hostname.split(".")[0] in short:
            return short.index(hostname.split(".")[0])
        raise RuntimeError(
            f"This host {hostname!r} is not among the compute hosts in LSB_DJOB_RANKFILE="
            f"{os.environ.get('LSB_DJOB_RANKFILE')} ({', '.join(hosts)}), so its node rank is unknown. "
            "Hint: run the training processes through `jsrun` on the job's compute hosts."
        )

    @override
    def processes_per_node(self) -> int | None:
        """None: LSF does not say (the rankfile lists slots, not processes), so set ``devices=`` explicitly."""
        return None

    @override
    def set_world_size(self, size: int) -> None:
        """Ignored: jsrun decides the world size."""

    @override
    def set_global_rank(self, rank: int) -> None:
        """Ignored: jsrun decides the ranks."""

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices`` × ``num_nodes`` equals the number of processes jsrun started.

        Args:
            num_devices: The Trainer's ``devices`` count (processes per node).
            num_nodes: The Trainer's ``num_nodes``.

        Raises:
            MisconfigurationError: ``devices`` × ``num_nodes`` differs from ``JSM_NAMESPACE_SIZE``.
        """
        world_size = self.world_size()
        if num_devices * num_nodes != world_size:
            raise MisconfigurationError(
                f"You set `devices={num_devices}` and `num_nodes={num_nodes}` ({num_devices * num_nodes} "
                f"processes), but jsrun started JSM_NAMESPACE_SIZE={world_size} processes. Hint: set "
                "`devices=` to the processes jsrun starts per node and `num_nodes=` to the number of nodes, "
                f"so that devices × num_nodes = {world_size}, or change `jsrun --nrs/--tasks_per_rs`."
            )

    @override
    def teardown(self) -> None:
        """Nothing to undo: this environment never writes ``os.environ``."""

    def _compute_hosts(self) -> list[str]:
        """The rankfile's host per line, without the launch node; read once, on first use."""
        if self._hosts is None:
            self._hosts = _read_rankfile()
        return self._hosts


def _read_rankfile() -> list[str]:
    path = os.environ.get("LSB_DJOB_RANKFILE")
    if not path:
        raise RuntimeError(f"The lsf cluster environment needs LSB_DJOB_RANKFILE, but it is not set. {_HINT}")
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.split()[0] for line in file if line.strip()]
    except OSError as exc:
        raise RuntimeError(f"Could not read the LSF rankfile LSB_DJOB_RANKFILE={path}: {exc}. {_HINT}") from exc
    if len(lines) < 2:
        raise RuntimeError(
            f"The LSF rankfile LSB_DJOB_RANKFILE={path} lists no compute host after the launch node on its "
            f"first line (it lists {lines or 'nothing'}). {_HINT}"
        )
    return lines[1:]


def _read_int(name: str) -> int:
    return read_int("lsf", name, _HINT)
