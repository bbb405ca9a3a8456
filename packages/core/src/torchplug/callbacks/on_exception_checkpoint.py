"""``OnExceptionCheckpoint``: write a checkpoint when a run fails or is interrupted, to resume from it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from typing_extensions import override

from torchplug.callbacks.callback import Callback
from torchplug.trainer.emergency import save_emergency_checkpoint

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["OnExceptionCheckpoint"]


class OnExceptionCheckpoint(Callback):
    """Save ``<dirpath>/<filename>.ckpt`` when the run raises (an error, ``KeyboardInterrupt``...).

    The checkpoint is an emergency checkpoint (:mod:`torchplug.trainer.emergency`), written through
    ``trainer.save_checkpoint`` before the Trainer tears down and announced with its path; a save
    that fails keeps the file an earlier failure left there. It holds everything an exact resume
    needs: ``trainer.fit(model, ckpt_path=callback.ckpt_path)`` continues from the failed step. A
    fit that ends without an exception removes a file left there by an earlier failure, so that a
    stale one is never resumed by mistake.

    Under DDP, ``save_checkpoint`` waits for every process: the exception must reach each of them
    (an interrupt of the whole job, or a failure every rank meets). A failure of one rank alone is
    handled by the launcher, which stops the others.

    Example:
        >>> Trainer(callbacks=[OnExceptionCheckpoint(dirpath="checkpoints")])

    Args:
        dirpath: The folder (a path or fsspec URL) to write to.
        filename: The file name without the ``.ckpt`` extension.
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        self.dirpath = os.path.expanduser(os.fspath(dirpath))
        self.filename = filename
        self._failed = False

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written."""
        return f"{self.dirpath.rstrip('/')}/{self.filename}{self.FILE_EXTENSION}"

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: no failure yet."""
        self._failed = False

    @override
    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """Write the checkpoint (replacing an older one once it is complete)."""
        self._failed = True
        stage = trainer.state.fn.value if trainer.state.fn is not None else "the run"
        reason = f"{stage}() raised {type(exception).__name__}: {exception}."
        save_emergency_checkpoint(trainer, self.ckpt_path, reason)

    @override
    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """After a fit that did not fail, remove a checkpoint an earlier failure left (validate/test keep it)."""
        if stage == "fit" and not self._failed and trainer.checkpoint_io.exists(self.ckpt_path):
            trainer.strategy.remove_checkpoint(self.ckpt_path)

    def __repr__(self) -> str:
        return f"OnExceptionCheckpoint(dirpath={self.dirpath!r}, filename={self.filename!r})"
