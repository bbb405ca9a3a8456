"""The ``mpi`` cluster environment: processes started by ``mpirun``/``mpiexec``.

Detection and ranks use only the environment variables MPI launchers export, so neither this
module nor :meth:`MPIEnvironment.evidence` imports mpi4py (importing it initialises MPI). mpi4py is
imported only to find the rendezvous when ``MASTER_ADDR``/``MASTER_PORT`` are not set.
Imports no torch.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, ClassVar

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.environments._variables import read_int
from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence
from torchplug.environments.local import find_free_port

__all__ = ["MPIEnvironment"]


@dataclass(frozen=True, slots=True)
class _Launcher:
    """The variables one MPI launcher exports to each process."""

    name: str
    size: str
    rank: str
    local_rank: str
    local_size: str
    node_rank: str | None = None


#: Asked in this order; the first whose size, rank and local-rank variables are all set is used.
#: Not here: PMIx alone (``PMIX_RANK`` comes without a size variable), and Open MPI's
#: ``OMPI_COMM_WORLD_NODE_RANK``, which is *not* a node index (it is the process's rank on its
#: node across all jobs).
_LAUNCHERS = (
    _Launcher(
        "Open MPI",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    _Launcher(
        "MVAPICH2",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
    _Launcher(
        name="Cray MPICH (PALS)",
        size="PMI_SIZE",
        rank="PMI_RANK",
        local_rank="PMI_LOCAL_RANK",
        local_size="PMI_LOCAL_SIZE",
        node_rank="PALS_NODEID",
    ),
    _Launcher("MPICH or Intel MPI (Hydra)", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)

_SUPPORTED = "; ".join(f"{lau.name}: {lau.size}, {lau.rank}, {lau.local_rank}" for lau in _LAUNCHERS)
_PER_NODE_FLAGS = "`mpirun --npernode N` (Open MPI) or `mpiexec -ppn N` (MPICH, Intel MPI)"


class MPIEnvironment(ClusterEnvironment):
    """Processes started by an MPI launcher (``mpirun``/``mpiexec``), more than one of them.

    Supported launchers, by the variables they export: Open MPI (``OMPI_COMM_WORLD_SIZE``,
    ``_RANK``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``), MVAPICH2 (``MV2_COMM_WORLD_*``), MPICH and Intel
    MPI through Hydra (``PMI_SIZE``, ``PMI_RANK``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``) and
    Cray MPICH under PALS (``PMI_SIZE``, ``PMI_RANK``, ``PMI_LOCAL_RANK``, ``PMI_LOCAL_SIZE``,
    ``PALS_NODEID``). PMIx alone is not detected (it exports no world size).

    The node rank is ``PALS_NODEID`` under PALS. Elsewhere it is computed as global rank // local
    size, which assumes the launcher's default block placement (consecutive ranks fill a node
    first: ``--map-by slot`` or ``core``, ``-ppn N``) and the same number of processes on every
    node; a placement that breaks this (``--map-by node``) is reported as an error, never guessed.

    The rendezvous is ``MASTER_ADDR``/``MASTER_PORT`` when set (set both on every rank, or on
    none). Otherwise mpi4py broadcasts rank 0's host name and a free port on it: reading
    :attr:`main_address` and :attr:`main_port` is then collective, every rank must do it (the
    strategy does, when it creates the process group). Nothing is written to ``os.environ``.
    """

    detect_priority: ClassVar[int] = 70

    def __init__(self) -> None:
        self._main_address: str | None = None
        self._main_port: int | None = None

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Detected when a supported launcher's size, rank and local-rank variables are set, with size > 1."""
        launcher = _find_launcher()
        if launcher is None:
            return Evidence.absent(
                "no MPI launcher variables (OMPI_COMM_WORLD_SIZE, PMI_SIZE, MV2_COMM_WORLD_SIZE) set"
            )
        size = os.environ[launcher.size]
        if not size.isdigit():
            return Evidence.absent(f"{launcher.size}={size!r} is not a number")
        if int(size) <= 1:
            return Evidence.absent(f"{launcher.size}={size}: a single process")
        return Evidence.found(f"{launcher.name}, {launcher.size}={size}")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: the MPI launcher started every process; torchplug must not spawn more."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """``MASTER_ADDR`` when set, else rank 0's host name broadcast with mpi4py (collective, cached).

        Raises:
            ImportError: ``MASTER_ADDR`` is not set and mpi4py is not installed.
        """
        if os.environ.get("MASTER_ADDR"):
            return os.environ["MASTER_ADDR"]
        if self._main_address is None:
            comm = _comm_world("address")
            hostname = socket.gethostname() if comm.Get_rank() == 0 else None
            self._main_address = str(comm.bcast(hostname, root=0))
        return self._main_address

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT`` when set, else a free port on rank 0 broadcast with mpi4py (collective, cached).

        Raises:
            ImportError: ``MASTER_PORT`` is not set and mpi4py is not installed.
            RuntimeError: ``MASTER_PORT`` is not an integer.
        """
        if os.environ.get("MASTER_PORT"):
            return _read_int("MASTER_PORT")
        if self._main_port is None:
            comm = _comm_world("port")
            port = find_free_port("") if comm.Get_rank() == 0 else None
            self._main_port = int(comm.bcast(port, root=0))
        return self._main_port

    @override
    def world_size(self) -> int:
        """The launcher's world size (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, ...).

        Raises:
            RuntimeError: No supported launcher's variables are set.
        """
        return _read_int(_launcher().size)

    @override
    def global_rank(self) -> int:
        """The launcher's rank of this process (``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ...)."""
        return _read_int(_launcher().rank)

    @override
    def local_rank(self) -> int:
        """This process's rank on its node (``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``, ...)."""
        return _read_int(_launcher().local_rank)

    @override
    def node_rank(self) -> int:
        """``PALS_NODEID`` under PALS, else global rank // processes per node (block placement, see the class).

        Raises:
            RuntimeError: The launcher does not say how many processes run on this node, or the
                ranks are not placed in blocks of that size.
        """
        launcher = _launcher()
        if launcher.node_rank is not None and launcher.node_rank in os.environ:
            return _read_int(launcher.node_rank)
        per_node = self.processes_per_node()
        if per_node is None:
            raise RuntimeError(
                f"Cannot compute the node rank: {launcher.name} did not set {launcher.local_size}. "
                "Hint: subclass MPIEnvironment and override node_rank() for your launcher, or start "
                "the processes with torchrun instead."
            )
        rank, local_rank = self.global_rank(), self.local_rank()
        if rank % per_node != local_rank:
            raise RuntimeError(
                f"Cannot compute the node rank: rank {rank} has local rank {local_rank} of {per_node} on its "
                "node, so the launcher did not place consecutive ranks on the same node. Hint: use block "
                "placement (`mpirun --map-by slot` for Open MPI, `mpiexec -ppn N` for MPICH and Intel MPI) "
                "with the same number of processes on every node."
            )
        return rank // per_node

    @override
    def set_world_size(self, size: int) -> None:
        """Ignored: the MPI launcher decides the world size (``-np``)."""

    @override
    def set_global_rank(self, rank: int) -> None:
        """Ignored: the MPI launcher decides the ranks."""

    @override
    def processes_per_node(self) -> int | None:
        """The launcher's local size (``OMPI_COMM_WORLD_LOCAL_SIZE``, ``MPI_LOCALNRANKS``, ...), or None if unset."""
        launcher = _launcher()
        return _read_int(launcher.local_size) if launcher.local_size in os.environ else None

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check ``devices=``/``num_nodes=`` against the processes the MPI launcher started.

        Args:
            num_devices: The Trainer's ``devices`` count (processes per node).
            num_nodes: The Trainer's ``num_nodes``.

        Raises:
            MisconfigurationError: ``devices`` differs from the processes on this node, or
                ``devices`` × ``num_nodes`` differs from the world size.
        """
        launcher = _launcher()
        world_size = self.world_size()
        per_node = self.processes_per_node()
        if per_node is not None and per_node != num_devices:
            raise MisconfigurationError(
                f"You set `devices={num_devices}`, but {launcher.name} started {per_node} processes on this "
                f'node ({launcher.local_size}={per_node}). Hint: set `devices={per_node}` (or `devices="auto"`), '
                f"or start {num_devices} per node with {_PER_NODE_FLAGS}."
            )
        if num_devices * num_nodes != world_size:
            raise MisconfigurationError(
                f"You set `devices={num_devices}` and `num_nodes={num_nodes}` ({num_devices * num_nodes} "
                f"processes), but {launcher.name} started {launcher.size}={world_size} processes. Hint: set "
                f"`devices=` and `num_nodes=` so that devices × num_nodes = {world_size}, or start "
                f"`mpirun -np {num_devices * num_nodes}` with {_PER_NODE_FLAGS}."
            )

    @override
    def teardown(self) -> None:
        """Nothing to undo: this environment never writes ``os.environ`` (MPI itself is left as it is)."""


def _find_launcher() -> _Launcher | None:
    for launcher in _LAUNCHERS:
        if all(name in os.environ for name in (launcher.size, launcher.rank, launcher.local_rank)):
            return launcher
    return None


def _launcher() -> _Launcher:
    launcher = _find_launcher()
    if launcher is None:
        raise RuntimeError(
            f"The mpi cluster environment found no MPI launcher's rank variables. Supported: {_SUPPORTED}. "
            "Hint: start the processes with `mpirun`/`mpiexec`, or choose another environment."
        )
    return launcher


def _comm_world(what: str) -> Any:
    """mpi4py's ``MPI.COMM_WORLD``, imported now (which initialises MPI), with an actionable error."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            f"The mpi cluster environment needs mpi4py to find the rendezvous {what}, because MASTER_ADDR and "
            "MASTER_PORT are not set. Hint: pip install mpi4py, or export MASTER_ADDR and MASTER_PORT to "
            "every rank (`mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500` with Open MPI, "
            "`mpiexec -genv MASTER_ADDR host0 -genv MASTER_PORT 29500` with MPICH and Intel MPI)."
        ) from exc
    return MPI.COMM_WORLD


def _read_int(name: str) -> int:
    return read_int("mpi", name)
