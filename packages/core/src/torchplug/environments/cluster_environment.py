"""The ClusterEnvironment base class: where ranks, world size and the rendezvous come from.

This module imports no torch at import time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from torchplug._registry import Registry
    from torchplug.io.checkpoint_io import CheckpointIO

__all__ = ["ClusterEnvironment"]


class ClusterEnvironment(ABC):
    """A scheduler or launcher that decides which process is which (SLURM, torchrun, MPI, ...).

    When the user names none, the Trainer asks every registered environment's :meth:`detect`,
    highest :attr:`detect_priority` first, and takes the first that says yes. Keep the module of
    an implementation free of torch and vendor imports: ``core plugins list`` and auto-detection
    import it to ask ``detect()``.
    """

    #: Order of automatic detection: higher is asked first. The fallback ``local`` has 0.
    detect_priority: ClassVar[int] = 10

    @classmethod
    @abstractmethod
    def detect(cls) -> bool:
        """Whether this process runs under this environment.

        Must have no side effects: read environment variables or files, never write them, never
        warn, never initialise a runtime (it is asked even when another environment wins).
        """

    @classmethod
    def detect_reason(cls) -> str | None:
        """The evidence behind :meth:`detect`, in words (``"SLURM_NTASKS=2, SLURM_JOB_ID=41"``), or None.

        Shown by ``trainer.describe()`` and ``core plugins list``. Same rules as ``detect``: no side effects.
        """
        return None

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """True when the scheduler already started one process per device (the launcher must not spawn)."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Host name or address of the rank-0 node, for the process-group rendezvous."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """Port on the rank-0 node for the rendezvous."""

    @abstractmethod
    def world_size(self) -> int:
        """The number of processes taking part."""

    def set_world_size(self, size: int) -> None:
        """Set the world size computed by the strategy (ignored where the scheduler decides it)."""

    @abstractmethod
    def global_rank(self) -> int:
        """This process's rank among all processes."""

    def set_global_rank(self, rank: int) -> None:
        """Set the rank computed by the strategy (ignored where the scheduler decides it)."""

    @abstractmethod
    def local_rank(self) -> int:
        """This process's rank on its node."""

    @abstractmethod
    def node_rank(self) -> int:
        """The rank of this process's node."""

    def processes_per_node(self) -> int | None:
        """How many processes the scheduler started on this node, or None when it does not say.

        With ``devices="auto"`` and an environment that creates processes externally, the Trainer
        uses this as the device count, so ``torchrun --nproc_per_node 4`` needs no ``devices=4``.
        """
        return None

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check the Trainer's ``devices`` and ``num_nodes`` against what the scheduler allocated.

        Raise ``ValueError`` naming both (``devices=4`` against ``--ntasks-per-node=2``) with a hint.
        """

    def teardown(self) -> None:
        """Undo anything set up for the run (environment variables the environment exported)."""

    # -- preemption (schedulers that can stop and requeue a job) --------------------------------

    def setup_preemption(self) -> bool:
        """Start watching for a preemption notice (for example with a signal handler that only sets a flag).

        Called on the main thread at the start of ``fit``.

        Returns:
            Whether :meth:`preemption_requested` can ever become True (the Trainer only polls then).
        """
        return False

    def preemption_requested(self) -> bool:
        """Whether a preemption notice arrived. Called at every step boundary: keep it a flag read."""
        return False

    def preemption_checkpoint_path(self, root_dir: str) -> str:
        """Where the Trainer writes the checkpoint before the job is requeued."""
        return f"{root_dir.rstrip('/')}/preemption.ckpt"

    def requeue(self) -> None:
        """Ask the scheduler to run the job again (called on global rank 0 after the checkpoint is written)."""

    def resume_checkpoint_path(self, root_dir: str, checkpoint_io: CheckpointIO) -> str | None:
        """The checkpoint a restarted job should resume from, or None for a fresh start.

        Called by ``fit`` when no ``ckpt_path`` is given.
        """
        return None

    def teardown_preemption(self) -> None:
        """Remove what :meth:`setup_preemption` installed (restore previous signal handlers)."""

    @classmethod
    def register_cluster_environments(cls, registry: Registry) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
