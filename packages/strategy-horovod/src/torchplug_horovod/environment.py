"""The ``horovod`` cluster environment: processes started by ``horovodrun`` (its Gloo controller)."""

from __future__ import annotations

import os
from typing import ClassVar, Final

from typing_extensions import override

from torchplug import MisconfigurationError
from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence

__all__ = ["HorovodEnvironment"]

#: What horovodrun exports to every process it starts with the Gloo controller.
_RANK_VARS: Final = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK")


def _read(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is not None:
            return default
        raise MisconfigurationError(
            f"{name} is not set. Hint: start the script with `horovodrun -np N python script.py`, which sets it."
        )
    try:
        return int(value)
    except ValueError:
        raise MisconfigurationError(f"{name}={value!r} is not an integer.") from None


class HorovodEnvironment(ClusterEnvironment):
    """Processes started by ``horovodrun`` (Gloo controller): ranks from ``HOROVOD_RANK``, ``HOROVOD_SIZE``...

    Detected from those variables, above SLURM and LSF (90) and below torchrun (100).
    ``horovodrun`` started every process: torchplug never starts more. Under ``horovodrun
    --mpi`` (mpirun) the core's ``mpi`` environment is detected instead, and serves as well.
    """

    detect_priority: ClassVar[int] = 95

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Detected when ``HOROVOD_RANK``, ``HOROVOD_SIZE`` and ``HOROVOD_LOCAL_RANK`` are all set."""
        return Evidence.unset(_RANK_VARS) or Evidence.found(f"HOROVOD_SIZE={os.environ['HOROVOD_SIZE']}")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: horovodrun started one process per slot."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """Horovod's rendezvous address (``HOROVOD_GLOO_RENDEZVOUS_ADDR``); Horovod connects the processes itself."""
        return os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")

    @property
    @override
    def main_port(self) -> int:
        """Horovod's rendezvous port (``HOROVOD_GLOO_RENDEZVOUS_PORT``)."""
        return _read("HOROVOD_GLOO_RENDEZVOUS_PORT", 0)

    @override
    def world_size(self) -> int:
        """``HOROVOD_SIZE``."""
        return _read("HOROVOD_SIZE")

    @override
    def set_world_size(self, size: int) -> None:
        """Refuse a world size other than horovodrun's (``-np``)."""
        if size != self.world_size():
            raise MisconfigurationError(
                f"horovodrun started {self.world_size()} processes (HOROVOD_SIZE), but devices × num_nodes asks for "
                f"{size}. Hint: leave devices='auto', or match horovodrun -np."
            )

    @override
    def global_rank(self) -> int:
        """``HOROVOD_RANK``."""
        return _read("HOROVOD_RANK")

    @override
    def set_global_rank(self, rank: int) -> None:
        """Nothing: the rank is horovodrun's."""

    @override
    def local_rank(self) -> int:
        """``HOROVOD_LOCAL_RANK``."""
        return _read("HOROVOD_LOCAL_RANK")

    @override
    def node_rank(self) -> int:
        """``HOROVOD_CROSS_RANK`` (0 when unset)."""
        return _read("HOROVOD_CROSS_RANK", 0)

    @override
    def processes_per_node(self) -> int | None:
        """``HOROVOD_LOCAL_SIZE``: what ``devices='auto'`` uses."""
        return _read("HOROVOD_LOCAL_SIZE", 0) or None
