"""Emergency checkpoints: the run saved now, when it must stop, without ever losing the last good checkpoint.

One mechanism behind every door a user knows: ``ModelCheckpoint(save_on_exception=True)`` and
``OnExceptionCheckpoint`` (an error ends the run), ``ModelCheckpoint(save_on_interrupt=True)``
(SIGINT or SIGTERM stopped ``fit``, :mod:`torchplug.trainer.signals`) and the cluster environment's
preemption notice (:mod:`torchplug.trainer.preemption`). Each door decides *whether* and *where*;
:func:`save_emergency_checkpoint` does the rest the same way for all of them:

- the checkpoint is written through ``trainer.save_checkpoint``, so on every process as the
  strategy requires (rank 0 writes, a sharded strategy gathers, a collective IO writes its
  shards), then the CheckpointIO is flushed: an asynchronous save is complete before it is named;
- the CheckpointIO writes atomically (complete or absent), so a save that fails leaves whatever
  the path held before, and nothing is removed here: the last good checkpoint is never lost;
- a failure is announced with its cause and returned, never raised: the error, signal or notice
  that ended the run is the one the user must see;
- success and failure are announced on global rank 0 through the ``torchplug`` logger, in one
  shape: ``<reason> The checkpoint of global step <n> was written to <path> (resume with ...)``.

It uses only the Trainer's public API, so the callbacks use it as they use the Trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.utilities.rank_zero import log

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["announce_checkpoint", "save_emergency_checkpoint"]


def save_emergency_checkpoint(trainer: Trainer, path: str, reason: str, weights_only: bool = False) -> bool:
    """Write the checkpoint of the run now to ``path``, on every process, and say where (see the module doc).

    Call it on every process at the same point, as ``trainer.save_checkpoint``.

    Args:
        trainer: The running Trainer.
        path: Where to write (a local path or fsspec URL); a checkpoint already there is replaced
            atomically, and kept as it was when the save fails.
        reason: Why the run stops, one sentence ending with a period (``"fit() raised ValueError: x."``):
            the announcement starts with it.
        weights_only: Write only the model's weights and hyperparameters.

    Returns:
        True when the checkpoint is complete at ``path``; False when the save failed (announced).
    """
    try:
        trainer.save_checkpoint(path, weights_only=weights_only)
        trainer.strategy.checkpoint_io.flush()  # an asynchronous save must be complete before it is named
    except Exception as exc:  # the run's own cause matters more: report this one, never raise it
        if trainer.is_global_zero:
            log.error(
                f"{reason} The emergency checkpoint of global step {trainer.global_step} could not be written to "
                f"{path} ({type(exc).__name__}: {exc}). No checkpoint was lost: {path} holds what it held before, "
                "and the checkpoints written earlier are all kept.",
                exc_info=exc,
            )
        return False
    announce_checkpoint(trainer, path, reason)
    return True


def announce_checkpoint(trainer: Trainer, path: str, reason: str, written: bool = True) -> None:
    """Say, on global rank 0, which checkpoint holds the run's state after ``reason``.

    Args:
        trainer: The running Trainer.
        path: The checkpoint.
        reason: Why the run stops (one sentence ending with a period).
        written: True when the checkpoint was just written; False when it was already there
            (nothing was trained since it was saved).
    """
    if trainer.is_global_zero:
        done = "was written to" if written else "is already"
        log.warning(
            f"{reason} The checkpoint of global step {trainer.global_step} {done} {path} "
            f"(resume with fit(..., ckpt_path={path!r}))"
        )
