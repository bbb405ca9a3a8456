"""The ClusterEnvironment base class: where ranks, world size and the rendezvous come from.

This module imports no torch at import time.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from torchplug._registry import Registry
    from torchplug.io.checkpoint_io import CheckpointIO

__all__ = ["ClusterEnvironment", "Evidence"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What an environment's :meth:`~ClusterEnvironment.evidence` found: detected or not, and why, in words.

    Attributes:
        detected: Whether this process runs under the environment.
        reason: The variables (or files) behind the answer, as a user would check them:
            ``"SLURM_JOB_ID=41, SLURM_NTASKS=2"`` when detected, ``"TORCHELASTIC_RUN_ID not set"``
            when not. Shown by ``trainer.describe()`` and ``core plugins list``. None only for an
            environment that needs no evidence (the ``local`` fallback).
    """

    detected: bool
    reason: str | None

    @classmethod
    def found(cls, reason: str) -> Evidence:
        """Detected, because of ``reason`` (``"LSB_JOBID=7, JSM_NAMESPACE_SIZE=4"``)."""
        return cls(True, reason)

    @classmethod
    def absent(cls, reason: str) -> Evidence:
        """Not detected, because of ``reason`` (``"LSB_DJOB_RANKFILE=/x is not a file"``)."""
        return cls(False, reason)

    @classmethod
    def unset(cls, names: Iterable[str]) -> Evidence | None:
        """Not detected when any of the variables ``names`` is unset (``"A, B not set"``); None when all are set.

        The common first step of an :meth:`~ClusterEnvironment.evidence`::

            return Evidence.unset(_REQUIRED) or Evidence.found(f"ACME_JOB={os.environ['ACME_JOB']}")
        """
        missing = [name for name in names if name not in os.environ]
        return cls.absent(f"{', '.join(missing)} not set") if missing else None


class ClusterEnvironment(ABC):
    """A scheduler or launcher that decides which process is which (SLURM, torchrun, MPI, ...).

    When the user names none, the Trainer asks every registered environment's :meth:`detect`,
    highest :attr:`detect_priority` first, and takes the first that says yes. Keep the module of
    an implementation free of torch and vendor imports: ``core plugins list`` and auto-detection
    import it to ask ``detect()``.

    Detection, the spec an environment implements:

    * Implement the classmethod :meth:`evidence` and nothing else for detection: it reads the
      environment variables (or files) the scheduler sets and returns an :class:`Evidence`, found
      or absent, with the variables that decided it in words. :meth:`detect` and
      :meth:`detect_reason` are derived from it here, once for every environment.
    * :meth:`evidence` must be pure: read ``os.environ`` and files, never write them, never warn,
      never initialise a runtime or import a vendor library (it is asked even when another
      environment wins, and by ``core plugins list``).
    * Set :attr:`detect_priority` to place it among the others (see the attribute).
    * An environment that is never detected automatically (it is brought by a strategy, or named
      by the user) returns ``Evidence.absent("never detected: ...")`` saying who brings it.

    For example, an environment detected from two variables::

        @classmethod
        @override
        def evidence(cls) -> Evidence:
            return Evidence.unset(("ACME_JOB", "ACME_RANK")) or Evidence.found(f"ACME_JOB={os.environ['ACME_JOB']}")

    A class that overrides :meth:`detect` itself (the Lightning-compatible form) keeps working: its
    :meth:`detect` is asked, and it has no reason to show unless it overrides :meth:`evidence` too.

    Attributes:
        detect_priority: The order of automatic detection: higher is asked first, and the first
            environment whose :meth:`detect` says yes is used (ties: by registry name). The scale
            of the built-ins: ``torchelastic`` 100 (torchrun inside any scheduler), ``slurm`` 90,
            ``lsf`` 80, ``mpi`` 70, ``kubeflow`` 60, the default 10, and the fallback ``local`` 0,
            which always says yes. Put an environment that runs inside another scheduler's
            allocation above that scheduler. ``detect()`` of a third-party environment runs
            within ``TORCHPLUG_PLUGIN_TIMEOUT`` seconds; one that raises or overstays is reported
            in the trace and passed over.
    """

    detect_priority: ClassVar[int] = 10

    @classmethod
    def evidence(cls) -> Evidence | None:
        """What says whether this process runs under this environment (see the class for the rules).

        Returns:
            An :class:`Evidence`. The base returns None: no evidence declared, so the environment
            is never detected (subclasses that override :meth:`detect` instead still are).
        """
        return None

    @classmethod
    def detect(cls) -> bool:
        """Whether this process runs under this environment: :meth:`evidence`'s answer (False without one).

        Has no side effects, as :meth:`evidence`.
        """
        found = cls.evidence()
        return found is not None and found.detected

    @classmethod
    def detect_reason(cls) -> str | None:
        """The evidence behind :meth:`detect`, in words (``"SLURM_NTASKS=2, SLURM_JOB_ID=41"``), or None.

        :meth:`evidence`'s reason. Shown by ``trainer.describe()`` and ``core plugins list``. No side effects.
        """
        found = cls.evidence()
        return None if found is None else found.reason

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

    def restart_count(self) -> int:
        """How many times the scheduler or launcher restarted this job (0 on its first run).

        When it is above 0 and ``fit`` is given no ``ckpt_path``, the Trainer resumes as with
        ``ckpt_path="auto"``: from the newest complete checkpoint of the run. Default: 0.
        """
        return 0

    def resume_checkpoint_path(self, root_dir: str, checkpoint_io: CheckpointIO) -> str | None:
        """The checkpoint a restarted job should resume from, or None for a fresh start.

        Called by ``fit`` when no ``ckpt_path`` is given and :meth:`restart_count` is 0 (an
        environment that counts restarts gets ``ckpt_path="auto"`` instead).
        """
        return None

    def teardown_preemption(self) -> None:
        """Remove what :meth:`setup_preemption` installed (restore previous signal handlers)."""

    @classmethod
    def register_cluster_environments(cls, registry: Registry) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
