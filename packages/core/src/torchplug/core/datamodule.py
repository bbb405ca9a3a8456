"""``torchplug.DataModule``: the data of an experiment, in one reusable class."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable, Mapping
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
        self._hparams_initial = copy.deepcopy(self._hparams)
        self._hparams_for_checkpoint = split_unsafe(values, type(self).__name__)

    @property
    def hparams(self) -> AttributeDict:
        """The hyperparameters saved with :meth:`save_hyperparameters`."""
        if self._hparams is None:
            self._hparams = AttributeDict()
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as :meth:`save_hyperparameters` saved them."""
        return copy.deepcopy(getattr(self, "_hparams_initial", None) or AttributeDict())

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A DataModule serving ready datasets through plain DataLoaders (the training one shuffles).

        Each argument may be one dataset, or a list or dict of them (several dataloaders). The
        ``*_dataloader`` methods of the datasets not given raise, as on a DataModule without them.

        Args:
            train_dataset: The training data.
            val_dataset: The validation data.
            test_dataset: The test data.
            predict_dataset: The predict data.
            batch_size: Every loader's batch size.
            num_workers: Every loader's worker processes.
            **datamodule_kwargs: Init arguments of ``cls`` (for a subclass that takes some).
        """
        from torch.utils.data import DataLoader, IterableDataset

        def loaders(data: Any, shuffle: bool) -> Any:
            if isinstance(data, Mapping):
                return {key: loaders(value, shuffle) for key, value in data.items()}
            if isinstance(data, (list, tuple)):
                return [loaders(value, shuffle) for value in data]
            return DataLoader(
                data,
                batch_size=batch_size,
                shuffle=shuffle and not isinstance(data, IterableDataset),
                num_workers=num_workers,
            )

        datamodule = cls(**datamodule_kwargs)
        given = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        for stage, data in given.items():
            if data is not None:
                built = loaders(data, shuffle=stage == "train")
                setattr(datamodule, f"{stage}_dataloader", lambda built=built: built)
        return datamodule
