"""Preemption: a scheduler's notice turned into a checkpoint, a requeue and a clean return from ``fit``.

The cluster environment (env-slurm's, for example) installs the signal handler, which only sets a
flag; the fit loop polls the flag at step boundaries through :class:`PreemptionWatch`, and every
process agrees before anyone stops. The checkpoint is an emergency checkpoint
(:mod:`torchplug.trainer.emergency`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.trainer.emergency import save_emergency_checkpoint
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["PreemptionWatch"]


class PreemptionWatch:
    """Watches the cluster environment for a preemption notice during ``fit``.

    Args:
        trainer: The Trainer being preempted.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        #: Whether the environment can announce a preemption in this run (the loop polls only then).
        self.active = False
        #: Whether the last fit stopped for a preemption.
        self.preempted = False

    def start(self) -> None:
        """Ask the environment to start watching (on the main thread, at the start of ``fit``)."""
        environment = self._trainer.cluster_environment
        self.preempted = False
        self.active = bool(environment is not None and environment.setup_preemption())

    def stop(self) -> None:
        """Remove what :meth:`start` installed (signal handlers)."""
        if self.active:
            self.active = False
            self._trainer.cluster_environment.teardown_preemption()

    def requested(self) -> bool:
        """Whether any process received a preemption notice (every process must call this at the same point)."""
        trainer = self._trainer
        requested = bool(trainer.cluster_environment.preemption_requested())
        if trainer.world_size > 1:
            return trainer.strategy.reduce_boolean_decision(requested, all=False)
        return requested

    def handle(self) -> None:
        """Write the preemption checkpoint on every process, request the requeue on rank 0, and stop training.

        The requeue is requested even when the checkpoint could not be written (that is announced):
        the scheduler stops the job anyway, and the restarted job resumes from the newest checkpoint
        that is complete, which the failed save left in place.
        """
        trainer = self._trainer
        environment = trainer.cluster_environment
        name = type(environment).__name__
        path = environment.preemption_checkpoint_path(trainer.default_root_dir)
        step = trainer.global_step
        save_emergency_checkpoint(trainer, path, f"Preempted at step {step} ({name}'s notice).")
        trainer.strategy.barrier("preemption")
        if trainer.is_global_zero:
            environment.requeue()
        rank_zero_warn(
            f"Preempted at step {step}: a requeue was requested from {name}; fit() returns now and the restarted "
            "job resumes from its newest complete checkpoint."
        )
        self.preempted = True
        trainer.should_stop = True
