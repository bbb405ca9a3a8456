"""Preemption: a scheduler's notice turned into a checkpoint, a requeue and a clean return from ``fit``.

The cluster environment (env-slurm's, for example) installs the signal handler, which only sets a
flag; the fit loop polls the flag at step boundaries through :class:`PreemptionWatch`, and every
process agrees before anyone stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug.trainer.checkpoint_connector import CheckpointConnector
    from torchplug.trainer.trainer import Trainer

__all__ = ["PreemptionWatch"]


class PreemptionWatch:
    """Watches the cluster environment for a preemption notice during ``fit``.

    Args:
        trainer: The Trainer being preempted.
        checkpoints: Writes the preemption checkpoint.
    """

    def __init__(self, trainer: Trainer, checkpoints: CheckpointConnector) -> None:
        self._trainer = trainer
        self._checkpoints = checkpoints
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
        """Write the preemption checkpoint on every process, request the requeue on rank 0, and stop training."""
        trainer = self._trainer
        environment = trainer.cluster_environment
        path = environment.preemption_checkpoint_path(trainer.default_root_dir)
        self._checkpoints.save(path)
        trainer.strategy.checkpoint_io.flush()
        trainer.strategy.barrier("preemption")
        if trainer.is_global_zero:
            environment.requeue()
        rank_zero_warn(
            f"Preempted at step {trainer.global_step}: checkpoint written to {path} and a requeue requested "
            f"from {type(environment).__name__}; fit() returns now and a restarted job resumes from it."
        )
        self.preempted = True
        trainer.should_stop = True
