"""Validation, test and predict loops: no gradients, every dataloader in turn, hooks around each batch."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from torchplug._errors import MisconfigurationError
from torchplug.loops.optimization import accepts_batch_idx
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy
from torchplug.trainer.data import IndexBatchSampler, batch_transfer, with_batch_indices
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.metrics import BATCH_EVAL, EPOCH
from torchplug.trainer.states import RunningStage

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.loops.state import LoopConfig, RunState
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector

__all__ = ["EvaluationLoop", "PredictionLoop"]

# stage -> (step method, hook infix, metric store name)
_STAGES: dict[RunningStage, tuple[str, str, str]] = {
    RunningStage.VALIDATING: ("validation_step", "validation", "validate"),
    RunningStage.TESTING: ("test_step", "test", "test"),
    RunningStage.PREDICTING: ("predict_step", "predict", "predict"),
}


def _accepts_dataloader_idx(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True
    return "dataloader_idx" in parameters or any(p.kind is p.VAR_POSITIONAL for p in parameters.values())


def _requires_dataloader_idx(function: Callable[..., Any]) -> bool:
    try:
        parameter = inspect.signature(function).parameters.get("dataloader_idx")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def grad_context(config: LoopConfig, strategy: Strategy) -> contextlib.AbstractContextManager[Any]:
    """``torch.inference_mode()`` (``Trainer(inference_mode=True)``, the default) or ``torch.no_grad()``.

    ``torch.no_grad()`` also where the strategy does not support inference mode (FSDP).
    """
    inference = config.inference_mode and strategy.supports_inference_mode
    return torch.inference_mode() if inference else torch.no_grad()


def _step_function(strategy: Strategy, module: Module, step_name: str, loaders: int) -> Callable[..., Any]:
    """``<step>(batch, batch_idx[, dataloader_idx])`` through the strategy and precision only where they change it.

    Raises:
        MisconfigurationError: Several dataloaders, but the step takes no ``dataloader_idx``.
    """
    precision = strategy.precision
    user_step = getattr(module, step_name)
    if loaders > 1 and not _accepts_dataloader_idx(user_step):
        raise MisconfigurationError(
            f"{loaders} dataloaders were given, but {type(module).__name__}.{step_name} takes no dataloader_idx "
            f"argument to tell them apart. Hint: def {step_name}(self, batch, batch_idx, dataloader_idx=0)."
        )
    if loaders == 1 and _requires_dataloader_idx(user_step):
        raise MisconfigurationError(
            f"One dataloader was given, but {type(module).__name__}.{step_name} requires a dataloader_idx argument. "
            f"Hint: give it a default, def {step_name}(self, batch, batch_idx, dataloader_idx=0), or remove it."
        )
    through_strategy = is_overridden(strategy, step_name, Strategy) or (
        precision is not None and is_overridden(precision, "forward_context", Precision)
    )
    step = getattr(strategy, step_name) if through_strategy else user_step
    with_idx = accepts_batch_idx(user_step)
    if loaders > 1:
        return step if with_idx else (lambda batch, batch_idx, dataloader_idx: step(batch, dataloader_idx))
    return step if with_idx else (lambda batch, batch_idx: step(batch))


class _ModuleModes:
    """The train/eval mode of every submodule, captured before evaluation and restored after it."""

    def __init__(self) -> None:
        self._modes: dict[torch.nn.Module, bool] = {}

    def capture(self, module: torch.nn.Module) -> None:
        self._modes = {m: m.training for m in module.modules()}

    def restore(self) -> None:
        for m, training in self._modes.items():
            m.training = training
        self._modes = {}


class EvaluationLoop:
    """Runs ``validation_step`` or ``test_step`` over dataloaders, with the hooks around them.

    Args:
        run: The run's configuration and state (the module, the stage).
        strategy: The strategy (devices, and the steps it changes).
        hooks: Runs the callbacks' and the module's hooks.
        logging: Receives the logged metrics.
        stage: :attr:`RunningStage.VALIDATING` or :attr:`RunningStage.TESTING`.
        logger_step: The step at which the epoch's metrics are logged (the fit's stepped batches).
        inside_fit: The validation loop of ``fit``: the step at which each batch's metrics are
            logged counts on across its runs (until :meth:`reset_step_counts`), as in Lightning.
            Otherwise it starts from 0 at each run.
    """

    def __init__(
        self,
        run: RunState,
        *,
        strategy: Strategy,
        hooks: HookRunner,
        logging: LoggerConnector,
        stage: RunningStage,
        logger_step: Callable[[], int],
        inside_fit: bool = False,
    ) -> None:
        self._run = run
        self._strategy = strategy
        self._logger_step = logger_step
        self._hooks = hooks
        self._logging = logging
        self.stage = stage
        self._modes = _ModuleModes()
        self._inside_fit = inside_fit
        self._seen: dict[int, int] = {}  # batches evaluated per dataloader: the logger step of their metrics

    def reset_step_counts(self) -> None:
        """Start counting the logger steps of per-batch metrics from 0 again (at the start of a ``fit``)."""
        self._seen = {}

    def run(
        self,
        loaders: list[Any],
        limits: list[float],
        sanity: bool = False,
        after_batches: Callable[[], None] | None = None,
    ) -> list[dict[str, float]]:
        """Evaluate over ``loaders`` (at most ``limits`` batches each); return the epoch metrics per dataloader.

        ``after_batches`` runs once every batch is done, before the epoch-end hooks (where checkpoints
        may be written): the fit loop marks its position there, so a resume does not validate again.
        """
        if not sum(limits):
            return []
        run, strategy, hooks = self._run, self._strategy, self._hooks
        module = run.module
        assert module is not None
        step_name, infix, store = _STAGES[self.stage]
        if sanity:
            store = "sanity_check"
        results = self._logging.results
        assert results is not None
        run.status.stage = RunningStage.SANITY_CHECKING if sanity else self.stage
        step = _step_function(strategy, module, step_name, len(loaders))
        results.set_stage(store, reset=True)
        results.phase = EPOCH
        if not self._inside_fit:
            self._seen = {}
        self._model_eval(infix)
        hooks.call(f"on_{infix}_start")
        hooks.call(f"on_{infix}_epoch_start")
        on_start = hooks.batch_hooks(f"on_{infix}_batch_start")
        on_end = hooks.batch_hooks(f"on_{infix}_batch_end")
        several = len(loaders) > 1
        log_steps = not sanity and bool(self._logging.loggers)
        seen = self._seen
        results.phase = BATCH_EVAL
        with grad_context(run.config, strategy):
            for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                transfer = batch_transfer(strategy, module, run.datamodule, loader_idx)
                results.dataloader_idx = loader_idx if several else None
                extra = (loader_idx,) if several else ()
                for batch_idx, batch in enumerate(loader):
                    if batch_idx >= limit:
                        break
                    batch = transfer(batch)
                    results.new_batch(batch)
                    for hook in on_start:
                        hook(batch, batch_idx, *extra)
                    outputs = step(batch, batch_idx, *extra)
                    for hook in on_end:
                        hook(outputs, batch, batch_idx, *extra)
                    if not sanity:
                        count = seen.get(loader_idx, 0)
                        seen[loader_idx] = count + 1
                        if log_steps:
                            self._logging.log_eval_step_metrics(count)
                if several:
                    results.compute_epoch(store, loader_idx)  # this dataloader's values, now it is done
        results.dataloader_idx = None
        results.phase = EPOCH
        if after_batches is not None:
            after_batches()
        hooks.call(f"on_{infix}_epoch_end")
        results.compute_epoch(store)
        if not sanity:
            self._logging.log_epoch_metrics(store, self._logger_step())
        results.phase = None
        hooks.call(f"on_{infix}_end")
        results.reset_metric_objects(store)
        self._model_train(infix)
        return results.results_per_dataloader(store, len(loaders))

    def _model_eval(self, infix: str) -> None:
        assert self._run.module is not None
        self._modes.capture(self._run.module)
        self._hooks.call_module(f"on_{infix}_model_eval")

    def _model_train(self, infix: str) -> None:
        hook = self._hooks.module_hook(f"on_{infix}_model_train")
        if hook is not None:
            hook()
        else:
            self._modes.restore()


class PredictionLoop:
    """Runs ``predict_step`` over dataloaders and keeps the predictions.

    Args:
        run: The run's configuration and state (the module, the stage).
        strategy: The strategy (devices, and the steps it changes).
        hooks: Runs the callbacks' and the module's hooks.
        writers: The attached prediction writers (:class:`torchplug.callbacks.BasePredictionWriter`).

    Attributes:
        current_batch_indices: The dataset indices of the batch being predicted, while a prediction
            writer (:class:`torchplug.callbacks.BasePredictionWriter`) is attached; None otherwise, or
            for a loader whose batches have no indices (an iterable dataset).
        epoch_batch_indices: Per dataloader, the indices of every batch predicted so far, while a
            writer that writes at the epoch's end is attached.
    """

    def __init__(
        self, run: RunState, *, strategy: Strategy, hooks: HookRunner, writers: Callable[[], list[Any]]
    ) -> None:
        self._run = run
        self._writers = writers
        self._strategy = strategy
        self._hooks = hooks
        self._modes = _ModuleModes()
        self._predictions: list[list[Any]] = []
        self.current_batch_indices: list[int] | None = None
        self.epoch_batch_indices: list[list[list[int]]] = []

    @property
    def predictions(self) -> Any:
        """The predictions of the last run: a list of batches, or one such list per dataloader when several."""
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def run(self, loaders: list[Any], limits: list[float], keep: bool) -> list[list[Any]]:
        """Predict over ``loaders``; return the predictions per dataloader (empty lists unless ``keep``).

        Predictions are also kept, whatever ``keep`` says, while a prediction writer that writes at
        the epoch's end is attached (it receives them in ``write_on_epoch_end``).
        """
        run, strategy, hooks = self._run, self._strategy, self._hooks
        module = run.module
        assert module is not None
        writers = self._writers()
        on_epoch = any(w.interval.on_epoch for w in writers)
        keep = keep or on_epoch
        if writers:  # decided once: the indices cost a sampler wrapper, paid only by runs that write
            loaders = [with_batch_indices(loader) for loader in loaders]
        run.status.stage = RunningStage.PREDICTING
        step = _step_function(strategy, module, "predict_step", len(loaders))
        self._modes.capture(module)
        self._predictions = [[] for _ in loaders]
        self.epoch_batch_indices = [[] for _ in loaders]
        self.current_batch_indices = None
        hooks.call_module("on_predict_model_eval")
        hooks.call("on_predict_start")
        hooks.call("on_predict_epoch_start")
        on_start = hooks.batch_hooks("on_predict_batch_start")
        on_end = hooks.batch_hooks("on_predict_batch_end")
        several = len(loaders) > 1
        with grad_context(run.config, strategy):
            for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                transfer = batch_transfer(strategy, module, run.datamodule, loader_idx)
                extra = (loader_idx,) if several else ()
                kept = self._predictions[loader_idx]
                sampler = getattr(loader, "batch_sampler", None) if writers else None
                tracker = sampler if isinstance(sampler, IndexBatchSampler) else None
                for batch_idx, batch in enumerate(loader):
                    if batch_idx >= limit:
                        break
                    if tracker is not None:  # the sampler ran ahead of this batch (in order), never behind it
                        self.current_batch_indices = tracker.seen_batch_indices[batch_idx]
                        if on_epoch:
                            self.epoch_batch_indices[loader_idx].append(self.current_batch_indices)
                    batch = transfer(batch)
                    for hook in on_start:
                        hook(batch, batch_idx, *extra)
                    output = step(batch, batch_idx, *extra)
                    if keep:
                        kept.append(output)
                    for hook in on_end:
                        hook(output, batch, batch_idx, *extra)
        hooks.call("on_predict_epoch_end")
        hooks.call("on_predict_end")
        self._modes.restore()
        return self._predictions
