"""Metric logging: what ``self.log`` recorded, sent to the loggers at the right steps, from rank 0 only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torchplug.loggers.logger import Logger
from torchplug.trainer.metrics import MetricStore
from torchplug.utilities.writable import refuse_unwritable

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["LoggerConnector"]


class LoggerConnector:
    """Owns a run's :class:`MetricStore` and sends its values to the Trainer's loggers.

    Args:
        trainer: The Trainer whose loggers receive the metrics (``trainer.loggers``).
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        #: The metrics of the run in progress (None before the first run).
        self.results: MetricStore | None = None
        self._logged: dict[str, torch.Tensor] = {}
        self._callback: dict[str, torch.Tensor] = {}
        self._prog_bar: dict[str, float] = {}

    # -- run life cycle ---------------------------------------------------------------------------

    def reset_results(self) -> MetricStore:
        """Start a new run's metric store (every process; ``sync_dist`` reduces through the strategy)."""
        trainer = self._trainer
        self.results = MetricStore(trainer.strategy.reduce, trainer.module, trainer.world_size)
        self.results.on_clear = self._keep
        self._callback, self._logged, self._prog_bar = {}, {}, {}
        return self.results

    def _keep(
        self, callback: dict[str, torch.Tensor], logged: dict[str, torch.Tensor], prog_bar: dict[str, float]
    ) -> None:
        """Keep a stage's last values when the store clears them (a new epoch): they stay readable, as in Lightning."""
        self._callback.update(callback)
        self._logged.update(logged)
        self._prog_bar.update(prog_bar)

    def reset_metrics(self) -> None:
        """Forget the values read so far (the callback, logged and progress bar metrics), as after the sanity check."""
        self._callback.clear()
        self._logged.clear()
        self._prog_bar.clear()

    @property
    def loggers(self) -> list[Logger]:
        """The loggers this process writes to: all of them on global rank 0, none elsewhere."""
        trainer = self._trainer
        return trainer.loggers if trainer.is_global_zero else []

    # -- sending ------------------------------------------------------------------------------------

    def log_metrics(self, metrics: dict[str, torch.Tensor], step: int, add_epoch: bool = True) -> None:
        """Send ``metrics`` to the loggers at ``step`` (as numbers); they stay in :attr:`logged_metrics` as tensors.

        The step is the count of batches that ended with an optimizer step (Lightning's logger step):
        the first training step logs at 0. With ``add_epoch`` (every row but the per-batch rows of
        validation and test), the current ``epoch`` is added unless a metric of that name was
        logged, and a logged ``step`` metric replaces the step, as in Lightning.
        """
        if not metrics:
            return
        self._logged.update(metrics)
        loggers = self.loggers
        if not loggers:
            return
        scalars = {name: float(value) for name, value in metrics.items()}
        if add_epoch:
            logged_step = scalars.pop("step", None)
            if logged_step is not None:
                step = int(logged_step)
            else:
                scalars.setdefault("epoch", float(self._trainer.current_epoch))
        for logger in loggers:
            logger.log_metrics(scalars, step)

    def log_step_metrics(self, step: int) -> None:
        """Send the active stage's step values at ``step`` (a training step)."""
        assert self.results is not None
        self.log_metrics(self.results.step_metrics(), step)

    def log_eval_step_metrics(self, step: int) -> None:
        """Send the step values of a validation or test batch, at the count of that dataloader's batches so far."""
        assert self.results is not None
        self.log_metrics(self.results.step_metrics(), step, add_epoch=False)

    def log_epoch_metrics(self, stage: str, step: int) -> None:
        """Send ``stage``'s epoch aggregates at ``step``."""
        assert self.results is not None
        self.log_metrics(self.results.epoch_metrics(stage), step)

    def log_hyperparams(self) -> None:
        """Send the module's (and the datamodule's) saved hyperparameters, unless the module opted out."""
        trainer = self._trainer
        params = dict(trainer.module.hparams)
        if trainer.datamodule is not None:
            params.update(trainer.datamodule.hparams)
        if params and getattr(trainer.module, "_log_hyperparams", True):  # save_hyperparameters(logger=False)
            for logger in self.loggers:
                logger.log_hyperparams(params)

    def log_graph(self) -> None:
        """Hand the module to every logger's ``log_graph`` (a logger that was asked for no graph does nothing)."""
        for logger in self.loggers:
            logger.log_graph(self._trainer.module)

    def save(self) -> None:
        """Flush every logger."""
        for logger in self.loggers:
            logger.save()

    def finalize(self, status: str) -> None:
        """Tell every logger the run ended (``"success"``, ``"failed"`` or ``"interrupted"``).

        After a successful run, pending checkpoint writes are completed first, so that a logger that
        uploads checkpoints at the end (``log_model=True``) finds every file.
        """
        if status == "success" and self.loggers:
            self._trainer.strategy.checkpoint_io.flush()
        for logger in self.loggers:
            logger.finalize(status)

    def refuse_unwritable_dirs(self) -> None:
        """Stop the run on every process when rank 0, which writes the logs, cannot write a logger's ``save_dir``.

        Called when the run starts, before anything asks a logger for its version directory.
        """
        trainer = self._trainer
        for logger in trainer.loggers:
            if logger.save_dir:
                what = f"{type(logger).__name__}(save_dir={logger.save_dir!r})"
                refuse_unwritable(logger.save_dir, what, trainer.strategy)

    def agree_on_log_dir(self) -> None:
        """Give every process rank 0's logger versions (only rank 0 knows the next free version directory)."""
        trainer = self._trainer
        for logger in trainer.loggers:
            if getattr(type(logger).version, "fset", None) is not None:
                agreed = trainer.strategy.broadcast(logger.version if trainer.is_global_zero else None)
                logger.version = agreed  # type: ignore[misc,assignment]  # settable on this class; rank 0 sent one

    # -- reading ------------------------------------------------------------------------------------

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every logged metric: one dict, kept up to date (a launcher may update it too)."""
        if self.results is not None:
            self._callback.update(self.results.callback_metrics())
        return self._callback

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The latest value of every metric logged with ``prog_bar=True``, as numbers: one dict, kept up to date.

        Values of an epoch that ended stay (after ``fit`` too, with or without a progress bar), as in Lightning.
        """
        if self.results is not None:
            self._prog_bar.update(self.results.progress_bar_metrics())
        return self._prog_bar

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every metric logged with ``logger=True``: one dict, kept up to date.

        Step values are updated after each batch, whether or not that step was sent to the loggers
        (``log_every_n_steps``), as in Lightning; a launcher may update it too.
        """
        if self.results is not None:
            self._logged.update(self.results.logged_metrics())
        return self._logged
