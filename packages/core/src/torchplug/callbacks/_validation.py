"""What the callbacks that act after validation share: whether this fit will validate at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["no_validation_reason"]


def no_validation_reason(trainer: Trainer) -> str | None:
    """Why this fit will run no validation from now on, in words; None when it will (or may) run one.

    Asked at ``on_train_start``, once the validation data is known: there is none (no
    ``validation_step``, no validation dataloader, ``limit_val_batches=0``), or
    ``check_val_every_n_epoch`` puts the next validation after ``max_epochs``.
    """
    if not trainer.enable_validation:
        return "this fit runs no validation (no validation_step or validation data, or limit_val_batches=0)"
    every, max_epochs = trainer.check_val_every_n_epoch, trainer.max_epochs
    if every is None or max_epochs is None or max_epochs == -1:
        return None
    following = (trainer.current_epoch // every + 1) * every - 1  # the first epoch e >= now with (e + 1) % every == 0
    if following < max_epochs:
        return None
    return (
        f"check_val_every_n_epoch={every} puts the next validation in epoch {following} (counting from 0), after "
        f"the last epoch of max_epochs={max_epochs}"
    )
