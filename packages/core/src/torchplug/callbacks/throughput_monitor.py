"""``ThroughputMonitor``: log batches, samples, items and FLOPs per second of training, validation, test and predict."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from torchplug.callbacks._logging import logger_step, should_update_logs
from torchplug.callbacks.callback import Callback
from torchplug.trainer.states import RunningStage, TrainerFn
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug.utilities.throughput import Throughput

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["ThroughputMonitor"]


class ThroughputMonitor(Callback):
    """Measure and log throughput (:class:`torchplug.utilities.throughput.Throughput`) on global rank 0.

    After every batch the accelerator is asked to finish its queued work
    (``trainer.accelerator.synchronize``, a no-op on the CPU) so that the clock is right, and the
    totals are updated: samples from ``batch_size_fn(batch)``, items from ``length_fn(batch)``,
    FLOPs from the module's ``flops_per_batch`` attribute when it has one (see
    :func:`torchplug.utilities.throughput.measure_flops`). The rates are logged as
    ``<stage>/<metric>`` (``train/device/samples_per_sec``, ``train/time``...) every
    ``log_every_n_steps`` optimizer steps in training and every ``log_every_n_steps`` batches in
    validation, test and predict. Training time excludes the validation runs within it.

    The synchronisation and the clock read are paid per batch, only by runs that use this callback.

    Example:
        >>> monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0))
        >>> Trainer(logger=CSVLogger("logs"), callbacks=[monitor])

    Args:
        batch_size_fn: The number of samples in a batch.
        length_fn: The number of items (tokens...) in a batch, for ``items_per_sec``.
        **kwargs: Passed to :class:`Throughput`: ``window_size`` (default 100), ``separator``,
            ``available_flops`` (one device's peak FLOPs per second, for ``device/mfu``).
    """

    def __init__(
        self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None, **kwargs: Any
    ) -> None:
        if not callable(batch_size_fn):
            raise TypeError(f"ThroughputMonitor(batch_size_fn={batch_size_fn!r}): give a function of the batch.")
        unknown = set(kwargs) - {"window_size", "separator", "available_flops"}
        if unknown:
            raise TypeError(
                f"ThroughputMonitor got unknown arguments {sorted(unknown)}; Throughput takes window_size, separator "
                "and available_flops."
            )
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.kwargs = kwargs
        self._throughputs: dict[RunningStage, Throughput] = {}
        self._t0s: dict[RunningStage, float] = {}
        self._elapsed: dict[RunningStage, float] = {}
        self._samples: dict[RunningStage, int] = {}
        self._batches: dict[RunningStage, int] = {}
        self._lengths: dict[RunningStage, int] = {}
        self._has_flops: bool | None = None

    @property
    def throughputs(self) -> dict[RunningStage, Throughput]:
        """The :class:`Throughput` of each stage measured so far."""
        return self._throughputs

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Make the stage's :class:`Throughput` (and validation's, for fit)."""
        stages = [RunningStage.TRAINING, RunningStage.VALIDATING] if stage == TrainerFn.FITTING.value else []
        stages += {"validate": [RunningStage.VALIDATING], "test": [RunningStage.TESTING]}.get(stage, [])
        stages += [RunningStage.PREDICTING] if stage == "predict" else []
        for running in stages:
            self._throughputs[running] = Throughput(world_size=trainer.world_size, **self.kwargs)

    def _start(self, trainer: Trainer, stage: RunningStage) -> None:
        if stage not in self._samples or trainer.state.fn is TrainerFn.FITTING:
            self._throughputs[stage].reset()
            self._samples[stage] = self._batches[stage] = self._lengths[stage] = 0
            self._elapsed[stage] = 0.0
        self._t0s[stage] = time.perf_counter()

    @torch.inference_mode()
    def _update(self, trainer: Trainer, module: Module, stage: RunningStage, batch: Any) -> None:
        trainer.accelerator.synchronize(trainer.strategy.root_device)
        elapsed = self._elapsed[stage] = time.perf_counter() - self._t0s[stage]
        if self._has_flops is None:
            self._has_flops = hasattr(module, "flops_per_batch")
            if not self._has_flops:
                rank_zero_warn(
                    f"ThroughputMonitor: {type(module).__name__} has no flops_per_batch attribute, so no FLOPs are "
                    "logged. Hint: set self.flops_per_batch = measure_flops(...) in setup()."
                )
        self._samples[stage] += self.batch_size_fn(batch)
        self._batches[stage] += 1
        if self.length_fn is not None:
            self._lengths[stage] += self.length_fn(batch)
        self._throughputs[stage].update(
            time=elapsed,
            batches=self._batches[stage],
            samples=self._samples[stage],
            lengths=None if self.length_fn is None else self._lengths[stage],
            flops=getattr(module, "flops_per_batch", None) if self._has_flops else None,
        )

    def _log(self, trainer: Trainer, stage: RunningStage, step: int) -> None:
        throughput = self._throughputs[stage]
        metrics = {f"{stage.value}{throughput.separator}{k}": float(v) for k, v in throughput.compute().items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step)

    # -- training -------------------------------------------------------------------------------

    @override
    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """Start the training clock."""
        if trainer.is_global_zero:
            self._start(trainer, RunningStage.TRAINING)

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Update after the batch; log after an optimizer step that is a logging step."""
        if not trainer.is_global_zero:
            return
        self._update(trainer, module, RunningStage.TRAINING, batch)
        stepped = (batch_idx + 1) % trainer.batches_per_optimizer_step == 0
        if stepped and should_update_logs(trainer):
            self._log(trainer, RunningStage.TRAINING, logger_step(trainer))

    # -- evaluation -----------------------------------------------------------------------------

    def _eval_batch(self, trainer: Trainer, module: Module, stage: RunningStage, batch: Any) -> None:
        self._update(trainer, module, stage, batch)
        count = self._batches[stage]
        if count % trainer.log_every_n_steps == 0:
            self._log(trainer, stage, count)

    @override
    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Start the validation clock (not in the sanity check)."""
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._start(trainer, RunningStage.VALIDATING)

    @override
    def on_validation_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Update after the batch; log every ``log_every_n_steps`` batches."""
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._eval_batch(trainer, module, RunningStage.VALIDATING, batch)

    @override
    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """During fit, move the training clock's start forward by the validation's time."""
        if not trainer.is_global_zero or trainer.sanity_checking or trainer.state.fn is not TrainerFn.FITTING:
            return
        if RunningStage.TRAINING in self._t0s:  # the training clock stood still since its last update
            self._t0s[RunningStage.TRAINING] = time.perf_counter() - self._elapsed.get(RunningStage.TRAINING, 0.0)

    @override
    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Start the test clock."""
        if trainer.is_global_zero:
            self._start(trainer, RunningStage.TESTING)

    @override
    def on_test_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Update after the batch; log every ``log_every_n_steps`` batches."""
        if trainer.is_global_zero:
            self._eval_batch(trainer, module, RunningStage.TESTING, batch)

    @override
    def on_predict_start(self, trainer: Trainer, module: Module) -> None:
        """Start the predict clock."""
        if trainer.is_global_zero:
            self._start(trainer, RunningStage.PREDICTING)

    @override
    def on_predict_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Update after the batch; log every ``log_every_n_steps`` batches."""
        if trainer.is_global_zero:
            self._eval_batch(trainer, module, RunningStage.PREDICTING, batch)
