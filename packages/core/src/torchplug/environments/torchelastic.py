"""The ``torchelastic`` cluster environment: processes started by ``torchrun`` (torch.distributed.elastic).

Detected from the variables torchrun's agent exports to every worker, so it wins wherever torchrun
is used, inside SLURM, LSF or a Kubernetes pod included. Imports no torch.
"""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.environments._variables import read_int, read_text
from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence

__all__ = ["TorchElasticEnvironment"]

#: What ``torch.distributed.is_torchelastic_launched()`` checks.
_RUN_ID = "TORCHELASTIC_RUN_ID"
#: The rank variables torchrun exports, all needed to run.
_RANK_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")

_HINT = "Hint: start the script with `torchrun --nproc_per_node=N --nnodes=M script.py`, which sets it."


class TorchElasticEnvironment(ClusterEnvironment):
    """Processes started by ``torchrun`` (or ``python -m torch.distributed.run``).

    Ranks come from ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and ``GROUP_RANK`` (the node rank);
    the rendezvous from ``MASTER_ADDR``/``MASTER_PORT``, which torchrun's agent exports to every
    worker. Nothing is written to ``os.environ``.

    Detection has the highest built-in priority (100), above SLURM (90): running torchrun inside a
    SLURM allocation uses torchrun's ranks.
    """

    detect_priority: ClassVar[int] = 100

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Detected when ``TORCHELASTIC_RUN_ID``, ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` are all set."""
        if _RUN_ID not in os.environ:
            return Evidence.absent(f"{_RUN_ID} not set")
        missing = [name for name in _RANK_VARS if name not in os.environ]
        if missing:
            return Evidence.absent(f"{_RUN_ID} set, but not {', '.join(missing)}")
        return Evidence.found(f"{_RUN_ID}={os.environ[_RUN_ID]}, WORLD_SIZE={os.environ['WORLD_SIZE']}")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: torchrun started one process per device; torchplug must not spawn more."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """``MASTER_ADDR``, as exported by torchrun.

        Raises:
            RuntimeError: ``MASTER_ADDR`` is not set (the process was not started by torchrun).
        """
        return read_text(
            "torchelastic",
            "MASTER_ADDR",
            f"{_RUN_ID} is set, and torchrun exports MASTER_ADDR to "
            f"every worker. {_HINT} Or export MASTER_ADDR and MASTER_PORT yourself.",
        )

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT``, as exported by torchrun.

        Raises:
            RuntimeError: ``MASTER_PORT`` is not set or not an integer.
        """
        return _read_int("MASTER_PORT")

    @override
    def world_size(self) -> int:
        """``WORLD_SIZE``: the number of processes torchrun started on all nodes."""
        return _read_int("WORLD_SIZE")

    @override
    def global_rank(self) -> int:
        """``RANK``: this process's rank among all processes."""
        return _read_int("RANK")

    @override
    def local_rank(self) -> int:
        """``LOCAL_RANK``: this process's rank on its node."""
        return _read_int("LOCAL_RANK")

    @override
    def node_rank(self) -> int:
        """``GROUP_RANK`` (torchrun's node rank), or 0 when it is not set (a single node)."""
        return _read_int("GROUP_RANK") if "GROUP_RANK" in os.environ else 0

    @override
    def set_world_size(self, size: int) -> None:
        """Ignored: torchrun decides the world size (``--nproc_per_node`` × ``--nnodes``)."""

    @override
    def set_global_rank(self, rank: int) -> None:
        """Ignored: torchrun decides the ranks."""

    @override
    def processes_per_node(self) -> int | None:
        """``LOCAL_WORLD_SIZE`` (torchrun's ``--nproc_per_node``), or None when it is not set."""
        return _read_int("LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in os.environ else None

    @override
    def restart_count(self) -> int:
        """``TORCHELASTIC_RESTART_COUNT``: how often torchrun restarted the workers (``--max-restarts``)."""
        return _read_int("TORCHELASTIC_RESTART_COUNT") if "TORCHELASTIC_RESTART_COUNT" in os.environ else 0

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check ``devices=``/``num_nodes=`` against what torchrun started.

        Args:
            num_devices: The Trainer's ``devices`` count (processes per node).
            num_nodes: The Trainer's ``num_nodes``.

        Raises:
            MisconfigurationError: ``devices`` differs from ``LOCAL_WORLD_SIZE`` (torchrun's
                ``--nproc_per_node``), or ``devices`` × ``num_nodes`` differs from ``WORLD_SIZE``.
        """
        world_size = self.world_size()
        per_node = self.processes_per_node()
        if per_node is not None and per_node != num_devices:
            raise MisconfigurationError(
                f"You set `devices={num_devices}`, but torchrun started {per_node} processes per node "
                f"(`--nproc_per_node={per_node}`, LOCAL_WORLD_SIZE={per_node}). "
                f'Hint: set `devices={per_node}` (or `devices="auto"`), or change `--nproc_per_node`.'
            )
        if num_devices * num_nodes != world_size:
            nodes = f"`num_nodes={world_size // per_node}`" if per_node else "`num_nodes=` to match `--nnodes`"
            raise MisconfigurationError(
                f"You set `devices={num_devices}` and `num_nodes={num_nodes}` ({num_devices * num_nodes} "
                f"processes), but torchrun started WORLD_SIZE={world_size} processes "
                f"(`--nproc_per_node` × `--nnodes`). Hint: set `devices=` to `--nproc_per_node` and "
                f"{nodes}, so that devices × num_nodes = {world_size}."
            )

    @override
    def teardown(self) -> None:
        """Nothing to undo: this environment never writes ``os.environ``."""


def _read_int(name: str) -> int:
    return read_int("torchelastic", name, _HINT)
