"""Catching a training loss that became NaN or infinite, without a host sync per step.

``Trainer(nonfinite_loss=...)`` chooses what happens:

* ``"raise"`` (default): the loss of the batch just run is checked every ``log_every_n_steps``
  batches, at the end of each epoch and at the end of ``fit`` (one sync each, none in between,
  so nothing is added to the steps). A non-finite loss stops training with
  :class:`~torchplug.NonFiniteLossError`, naming the step where it was found and the last step
  where it was still finite. A loss that turned NaN or infinite stays so: the weights updated
  from it are not finite either (unless a loss scaler skipped that step, and then nothing was harmed).
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
    from torchplug.loops.state import LoopConfig
    from torchplug.strategies.strategy import Strategy
    from torchplug.trainer.states import FitProgress

__all__ = ["LossCheck"]

_HINT = (
    "Hint: lower the learning rate, clip the gradients (gradient_clip_val=1.0), look for NaN or inf in the data "
    "or in a division or log of the loss; Trainer(nonfinite_loss='skip') skips such steps with a warning, and "
    "nonfinite_loss='ignore' turns the check off."
)


class LossCheck:
    """The non-finite loss check of one ``fit``, as ``Trainer(nonfinite_loss=...)`` asks.

    Args:
        config: The loop arguments (``nonfinite_loss`` and ``log_every_n_steps`` are read).
        strategy: Where the processes agree on a verdict.
        progress: The fit loop's position, read when a loss is recorded.
    """

    def __init__(self, config: LoopConfig, strategy: Strategy, progress: FitProgress) -> None:
        self.mode: str = config.nonfinite_loss
        #: Check every this many batches (0: never between epoch ends, as with ``"skip"`` and ``"ignore"``).
        self.every = max(1, config.log_every_n_steps) if self.mode == "raise" else 0
        self._strategy = strategy
        self._progress = progress
        self._finite_at: int | None = None  # the global step of the last check that passed
        self._bad_in_window = False  # "skip": a non-finite loss since the last optimizer step
        #: Optimizer steps skipped so far in this fit (``"skip"`` only).
        self.skipped = 0

    # -- "raise" ------------------------------------------------------------------------------------

    def check(self, loss: torch.Tensor | None, batch_idx: int) -> None:
        """Check the loss of the batch just run (one sync); raise if it is NaN or infinite (``"raise"``).

        Every process calls it at the same batches; when several processes train, they agree (one
        collective), so that all of them stop together.

        Args:
            loss: The loss of batch ``batch_idx`` of the current epoch (None: nothing to check).
            batch_idx: Its index in the epoch, for the message.

        Raises:
            NonFiniteLossError: The loss of this process, or of another one, is not finite.
        """
        if self.mode != "raise":
            return
        strategy, progress = self._strategy, self._progress
        bad = loss is not None and not bool(torch.isfinite(loss.detach()).all())
        if strategy.world_size > 1 and strategy.reduce_boolean_decision(bad, all=False) and not bad:
            raise NonFiniteLossError(
                f"The training loss of another process is not finite at global step {progress.global_step} (this "
                f"process, global rank {strategy.global_rank}, has a finite one). {_HINT}"
            )
        if not bad:
            self._finite_at = progress.global_step
            return
        assert loss is not None
        values = loss.detach().float().reshape(-1)
        value = float(values[~torch.isfinite(values)][0])
        since = (
            f"it was still finite at global step {self._finite_at}, the check before"
            if self._finite_at is not None
            else "no check before found a finite one"
        )
        raise NonFiniteLossError(
            f"The training loss is {value} at global step {progress.global_step} (epoch {progress.epoch}, batch "
            f"{batch_idx}); {since}. Training stopped: the weights updated from it are not finite either. The loss "
            f"is checked every log_every_n_steps={self.every} batches and at the end of each epoch, at no cost in "
            f"between; log_every_n_steps=1 finds the exact step. {_HINT}"
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
        strategy = self._strategy
        if strategy.world_size > 1:
            bad = strategy.reduce_boolean_decision(bad, all=False)
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
