"""``torchplug.DataModule``: the data of an experiment, in one reusable class."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from torchplug.core.hparams import AttributeDict, collect_init_args, split_unsafe

__all__ = ["DataModule"]


class DataModule:
    """Downloads, splits and serves the data: implement the ``*_dataloader`` methods you need.

    ``prepare_data`` runs once per node (downloads); ``setup(stage)`` runs in every process
    (splits, transforms). Dataloaders may also be passed to ``Trainer.fit`` directly instead.
    """

    #: The Trainer using this DataModule (set by the Trainer).
    trainer: Any = None
    _hparams: AttributeDict | None = None
    _hparams_for_checkpoint: dict[str, Any] | None = None

    def prepare_data(self) -> None:
        """Download or write data to disk; called on local rank 0 of each node only. Do not set state here."""

    def setup(self, stage: str) -> None:
        """Load and split the data in every process (``stage``: ``"fit"``, ``"validate"``, ``"test"``...)."""

    def teardown(self, stage: str) -> None:
        """Release the data at the end of a run."""

    def train_dataloader(self) -> Any:
        """The training dataloader (or iterable of batches)."""
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader(); define it to fit.")

    def val_dataloader(self) -> Any:
        """The validation dataloader(s); a list gives several (``dataloader_idx`` in validation_step)."""
        return []

    def test_dataloader(self) -> Any:
        """The test dataloader(s)."""
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader(); define it to test.")

    def predict_dataloader(self) -> Any:
        """The predict dataloader(s)."""
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader(); define it to predict.")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the host, before it moves to the device (this override wins over the module's)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (this override wins over the module's)."""
        from torchplug.utilities.apply import move_to_device

        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the device, after the transfer (this override wins over the module's)."""
        return batch

    def on_exception(self, exception: BaseException) -> None:
        """Called when a run fails (or is interrupted), after the callbacks' ``on_exception``."""

    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints (plain data)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def save_hyperparameters(self, *args: Any, ignore: Iterable[str] | str = ()) -> None:
        """Store the ``__init__`` arguments in :attr:`hparams` and checkpoints (as ``Module.save_hyperparameters``)."""
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        ignored = (ignore,) if isinstance(ignore, str) else tuple(ignore)
        values = collect_init_args(frame.f_back, self, args, ignored)
        self._hparams = AttributeDict(values)
        self._hparams_for_checkpoint = split_unsafe(values, type(self).__name__)

    @property
    def hparams(self) -> AttributeDict:
        """The hyperparameters saved with :meth:`save_hyperparameters`."""
        if self._hparams is None:
            self._hparams = AttributeDict()
        return self._hparams
