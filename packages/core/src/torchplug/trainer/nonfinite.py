"""Catching a training loss that became NaN or infinite, without a host sync per step.

``Trainer(nonfinite_loss=...)`` chooses what happens:

* ``"raise"`` (default): every batch's loss is kept on its device in a short window (a reference,
  no copy, no sync); the window is checked in one go every ``log_every_n_steps`` batches, at the
  end of each epoch and at the end of ``fit``, with one sync. A non-finite loss stops training
  with :class:`~torchplug.NonFiniteLossError`, naming the epoch, the batch and the global step
  where it first appeared.
* ``"skip"``: every loss is checked before its optimizer step (one sync per batch, and one
  collective per step when several processes train); a step whose accumulated batches hold a
  non-finite loss is skipped (its gradients are dropped), with a warning.
* ``"ignore"``: no check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torchplug._errors import NonFiniteLossError
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug.trainer.states import FitProgress
    from torchplug.trainer.trainer import Trainer

__all__ = ["LossCheck"]

_HINT = (
    "Hint: lower the learning rate, clip the gradients (gradient_clip_val=1.0), look for NaN or inf in the data "
    "or in a division or log of the loss; Trainer(nonfinite_loss='skip') skips such steps with a warning, and "
    "nonfinite_loss='ignore' turns the check off."
)


class LossCheck:
    """The non-finite loss check of one ``fit``, as ``Trainer(nonfinite_loss=...)`` asks.

    Args:
        trainer: The Trainer (its ``nonfinite_loss``, ``log_every_n_steps`` and strategy are read).
        progress: The fit loop's position, read when a loss is recorded.
    """

    def __init__(self, trainer: Trainer, progress: FitProgress) -> None:
        self.mode: str = trainer.nonfinite_loss
        self._trainer = trainer
        self._progress = progress
        self._every = max(1, trainer.log_every_n_steps)
        # (epoch, batch_idx, global step of that batch's optimizer step, the loss tensor), oldest first
        self._window: list[tuple[int, int, int, torch.Tensor]] = []
        self._batches = 0  # batches recorded since the last check
        self._bad_in_window = False  # "skip": a non-finite loss since the last optimizer step
        #: Optimizer steps skipped so far in this fit (``"skip"`` only).
        self.skipped = 0

    # -- "raise" ------------------------------------------------------------------------------------

    def record(self, loss: torch.Tensor | None, batch_idx: int, step: int) -> None:
        """Keep the loss of the batch just run (``step``: the global step it ran at); check every few batches.

        Every process checks after the same number of batches (a batch without a loss counts too).
        """
        self._batches += 1
        if loss is not None:
            self._window.append((self._progress.epoch, batch_idx, step, loss.detach()))
        if self._batches >= self._every:
            self.check()

    def check(self) -> None:
        """Check the losses kept since the last check, with one sync; raise on the first non-finite one.

        Every process calls it at the same points; when several processes train, they agree (one
        collective), so that all of them stop together.

        Raises:
            NonFiniteLossError: A kept loss is NaN or infinite.
        """
        window, self._window = self._window, []
        self._batches = 0
        if self.mode != "raise":
            return
        first = _first_nonfinite([loss for *_, loss in window]) if window else None
        strategy = self._trainer.strategy
        if self._trainer.world_size > 1 and not strategy.reduce_boolean_decision(first is not None, all=False):
            return
        if first is None:
            if self._trainer.world_size > 1:  # another process saw one: stop with it
                raise NonFiniteLossError(
                    f"The training loss of another process became non-finite (this process, global rank "
                    f"{self._trainer.global_rank}, saw finite losses up to global step "
                    f"{self._progress.global_step}). {_HINT}"
                )
            return
        epoch, batch_idx, step, loss = window[first]
        value = float(loss.float().reshape(-1)[~torch.isfinite(loss.float().reshape(-1))][0])
        raise NonFiniteLossError(
            f"The training loss is {value} at epoch {epoch}, batch {batch_idx} (global step {step}); the losses "
            f"before it were finite. Training stopped: the weights updated from it are not finite either "
            f"(checked every log_every_n_steps={self._every} batches and at the end of each epoch). {_HINT}"
        )

    # -- "skip" -------------------------------------------------------------------------------------

    def note(self, loss: torch.Tensor | None) -> None:
        """Check one batch's loss now, after its backward (``"skip"``: one sync)."""
        if loss is not None and not bool(torch.isfinite(loss.detach()).all()):
            self._bad_in_window = True

    def drop_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the optimizer step due now must be skipped; if so, its gradients are dropped (``"skip"``).

        Every process decides together (one collective when several train): all skip, or none.
        """
        bad, self._bad_in_window = self._bad_in_window, False
        trainer = self._trainer
        if trainer.world_size > 1:
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if not bad:
            return False
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None
        self.skipped += 1
        progress = self._progress
        rank_zero_warn(
            f"nonfinite_loss='skip': a non-finite training loss at epoch {progress.epoch}, global step "
            f"{progress.global_step}; its optimizer step was skipped ({self.skipped} skipped so far)."
        )
        return True


def _first_nonfinite(losses: list[torch.Tensor]) -> int | None:
    """Index of the first loss holding a NaN or an infinity, with one sync for the whole list."""
    try:  # losses of one shape on one device (scalars, as a rule): two kernels for the whole window
        finite = torch.isfinite(torch.stack(losses)).reshape(len(losses), -1).all(dim=1)
    except RuntimeError:  # shapes or devices differ: each is checked where it is
        finite = torch.stack([torch.isfinite(loss).all().cpu() for loss in losses])
    bad = (~finite).nonzero()
    return int(bad[0, 0]) if bad.numel() else None
