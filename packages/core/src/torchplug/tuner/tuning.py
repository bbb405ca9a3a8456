"""``Tuner``: search a learning rate or a batch size in a short fit of its own, before the real one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.batch_size_finder import BatchSizeFinder
from torchplug.callbacks.callback import Callback
from torchplug.callbacks.lr_finder import LearningRateFinder
from torchplug.tuner._attributes import set_attr
from torchplug.tuner.lr_finder import find_lr_attr

if TYPE_CHECKING:
    from torchplug.core.datamodule import DataModule
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer
    from torchplug.tuner.lr_finder import LRFinder

__all__ = ["Tuner"]


class Tuner:
    """Tune a Trainer's model before training it: ``Tuner(trainer).lr_find(model)``, ``.scale_batch_size(model)``.

    Each method runs ``trainer.fit`` with a finder callback that searches at the start of the fit
    and then ends it, without training: afterwards the model's weights, the optimizer, the loop
    and the random state are those before the search, and only the value found is set on the
    model (``lr``, ``batch_size``), so that the next ``trainer.fit(model)`` uses it.

    Example::

        tuner = Tuner(trainer)
        finder = tuner.lr_find(model, datamodule=data)
        finder.save_plot("lr_find.png")          # needs matplotlib: pip install 'core[matplotlib]'
        print(finder.suggestion())               # also written to model.lr
        tuner.scale_batch_size(model, datamodule=data, mode="binsearch")
        trainer.fit(model, datamodule=data)

    Args:
        trainer: The Trainer to tune with (its strategy, devices and callbacks are used as they are).
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def lr_find(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Run the learning-rate range test (see :class:`torchplug.callbacks.LearningRateFinder`).

        Args:
            model: The model to tune.
            train_dataloaders: As in ``trainer.fit`` (or a DataModule).
            val_dataloaders: As in ``trainer.fit``.
            dataloaders: Refused: the search trains, so it takes ``fit``'s dataloaders.
            datamodule: As in ``trainer.fit``.
            method: ``"fit"``, the only one.
            min_lr: The first learning rate.
            max_lr: The last one.
            num_training: Optimizer steps in the search.
            mode: ``"exponential"`` or ``"linear"``.
            early_stop_threshold: Stop when the smoothed loss exceeds this times the best one (None: never).
            update_attr: Write the suggestion to ``model.lr`` (or ``learning_rate``, or ``attr_name``).
            attr_name: The model's learning-rate attribute.

        Returns:
            The :class:`LRFinder` (its ``suggestion()``, ``plot()`` and ``save_plot(path)``), or None
            under ``fast_dev_run``.

        Raises:
            MisconfigurationError: Another ``method``, ``dataloaders=``, or a LearningRateFinder
                among the Trainer's callbacks already.
        """
        self._check(method, dataloaders, LearningRateFinder, "lr_find")
        if update_attr:
            attr_name = find_lr_attr(model, self._trainer, attr_name)  # fail before the fit starts
        finder = LearningRateFinder(
            min_lr=min_lr,
            max_lr=max_lr,
            num_training_steps=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
            update_attr=update_attr,
            attr_name=attr_name,
        )
        self._run(finder, model, train_dataloaders, val_dataloaders, datamodule)
        result = finder.optimal_lr
        if update_attr and result is not None:
            lr = result.suggestion()
            if lr is not None:  # also in this process when the search ran in spawned workers
                set_attr(model, attr_name, lr, self._trainer)
        return result

    def scale_batch_size(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """Find the largest batch size that trains without running out of memory (see :class:`BatchSizeFinder`).

        The model (or DataModule) must hold ``batch_arg_name`` and build its dataloaders from it:
        dataloaders given to this method directly cannot be rebuilt and are refused.

        Args:
            model: The model to tune.
            train_dataloaders: Refused (see above); a DataModule is accepted here, as in ``fit``.
            val_dataloaders: Refused (see above).
            dataloaders: Refused: the search trains.
            datamodule: The DataModule whose dataloaders read ``batch_arg_name``.
            method: ``"fit"``, the only one.
            mode: ``"power"`` or ``"binsearch"``.
            steps_per_trial: Optimizer steps per trial.
            init_val: The first size tried.
            max_trials: At most this many successful trials.
            batch_arg_name: The attribute or hyperparameter that holds the batch size.
            margin: ``binsearch``: the fraction given back for safety (not when the size found
                covers the whole training set).
            max_val: Never try more than this, nor more than the training set's length.

        Returns:
            The size found (also set on the model or DataModule), or None under ``fast_dev_run``.

        Raises:
            MisconfigurationError: Another ``method``, dataloaders given directly, a BatchSizeFinder
                among the Trainer's callbacks already, or several processes.
        """
        self._check(method, dataloaders, BatchSizeFinder, "scale_batch_size")
        if val_dataloaders is not None or (train_dataloaders is not None and not _is_datamodule(train_dataloaders)):
            raise MisconfigurationError(
                "scale_batch_size() rebuilds the dataloaders with each size, so it cannot use dataloaders passed to "
                "it. Hint: return them from train_dataloader()/val_dataloader() of the model or a DataModule that "
                f"reads self.{batch_arg_name}."
            )
        finder = BatchSizeFinder(
            mode=mode,
            steps_per_trial=steps_per_trial,
            init_val=init_val,
            max_trials=max_trials,
            batch_arg_name=batch_arg_name,
            margin=margin,
            max_val=max_val,
        )
        self._run(finder, model, train_dataloaders, None, datamodule)
        return finder.optimal_batch_size

    def _check(self, method: str, dataloaders: Any, finder_type: type[Callback], name: str) -> None:
        if method != "fit":
            raise MisconfigurationError(
                f"Tuner.{name}(method={method!r}): only 'fit' is supported (the search trains). Hint: tune with "
                "method='fit', then validate or test with the values found."
            )
        if dataloaders is not None:
            raise MisconfigurationError(
                f"Tuner.{name}(dataloaders=...) is for evaluation methods; the search trains. Hint: pass "
                "train_dataloaders=... (or a datamodule)."
            )
        if any(isinstance(c, finder_type) for c in self._trainer.callbacks):
            raise MisconfigurationError(
                f"The Trainer already has a {finder_type.__name__} callback, which searches at the start of every "
                f"fit. Hint: remove it, or call trainer.fit() instead of Tuner.{name}()."
            )

    def _run(self, finder: Any, model: Module, train: Any, val: Any, datamodule: DataModule | None) -> None:
        trainer = self._trainer
        finder._early_exit = True  # the finder ends the fit once it has searched
        callbacks = trainer.callbacks
        trainer.callbacks = [finder, *callbacks]
        try:
            trainer.fit(model, train, val, datamodule)
        finally:
            trainer.callbacks = [c for c in trainer.callbacks if c is not finder]


def _is_datamodule(value: Any) -> bool:
    from torchplug.core.datamodule import DataModule

    return isinstance(value, DataModule)
