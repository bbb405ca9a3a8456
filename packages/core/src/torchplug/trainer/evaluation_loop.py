"""Validation, test and predict loops: no gradients, every dataloader in turn, hooks around each batch."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from torchplug._errors import MisconfigurationError
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy
from torchplug.trainer.data import batch_transfer
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.metrics import BATCH_EVAL, EPOCH
from torchplug.trainer.optimization import accepts_batch_idx
from torchplug.trainer.states import RunningStage

if TYPE_CHECKING:
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector
    from torchplug.trainer.trainer import Trainer

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


def grad_context(trainer: Trainer) -> contextlib.AbstractContextManager[Any]:
    """``torch.inference_mode()`` (``Trainer(inference_mode=True)``, the default) or ``torch.no_grad()``."""
    return torch.inference_mode() if trainer.inference_mode else torch.no_grad()


def _step_function(trainer: Trainer, step_name: str, loaders: int) -> Callable[..., Any]:
    """``<step>(batch, batch_idx[, dataloader_idx])`` through the strategy and precision only where they change it.

    Raises:
        MisconfigurationError: Several dataloaders, but the step takes no ``dataloader_idx``.
    """
    strategy, module = trainer.strategy, trainer.module
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
        trainer: The Trainer (read through its public API).
        hooks: Runs the callbacks' and the module's hooks.
        logging: Receives the logged metrics.
        stage: :attr:`RunningStage.VALIDATING` or :attr:`RunningStage.TESTING`.
        inside_fit: The validation loop of ``fit``: the step at which each batch's metrics are
            logged counts on across its runs (until :meth:`reset_step_counts`), as in Lightning.
            Otherwise it starts from 0 at each run.
    """

    def __init__(
        self,
        trainer: Trainer,
        hooks: HookRunner,
        logging: LoggerConnector,
        stage: RunningStage,
        inside_fit: bool = False,
    ) -> None:
        self.trainer = trainer
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
        trainer, hooks = self.trainer, self._hooks
        step_name, infix, store = _STAGES[self.stage]
        if sanity:
            store = "sanity_check"
        results = self._logging.results
        assert results is not None
        trainer.state.stage = RunningStage.SANITY_CHECKING if sanity else self.stage
        step = _step_function(trainer, step_name, len(loaders))
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
        with grad_context(trainer):
            for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                transfer = batch_transfer(trainer, loader_idx)
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
            self._logging.log_epoch_metrics(store, trainer.fit_loop.progress.stepped_batches)
        results.phase = None
        hooks.call(f"on_{infix}_end")
        results.reset_metric_objects(store)
        self._model_train(infix)
        return results.results_per_dataloader(store, len(loaders))

    def _model_eval(self, infix: str) -> None:
        self._modes.capture(self.trainer.module)
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
        trainer: The Trainer (read through its public API).
        hooks: Runs the callbacks' and the module's hooks.
    """

    def __init__(self, trainer: Trainer, hooks: HookRunner) -> None:
        self.trainer = trainer
        self._hooks = hooks
        self._modes = _ModuleModes()

    def run(self, loaders: list[Any], limits: list[float], keep: bool) -> list[list[Any]]:
        """Predict over ``loaders``; return the predictions per dataloader (empty lists unless ``keep``)."""
        trainer, hooks = self.trainer, self._hooks
        trainer.state.stage = RunningStage.PREDICTING
        step = _step_function(trainer, "predict_step", len(loaders))
        self._modes.capture(trainer.module)
        hooks.call_module("on_predict_model_eval")
        hooks.call("on_predict_start")
        hooks.call("on_predict_epoch_start")
        on_start = hooks.batch_hooks("on_predict_batch_start")
        on_end = hooks.batch_hooks("on_predict_batch_end")
        several = len(loaders) > 1
        predictions: list[list[Any]] = []
        with grad_context(trainer):
            for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
                transfer = batch_transfer(trainer, loader_idx)
                extra = (loader_idx,) if several else ()
                kept: list[Any] = []
                for batch_idx, batch in enumerate(loader):
                    if batch_idx >= limit:
                        break
                    batch = transfer(batch)
                    for hook in on_start:
                        hook(batch, batch_idx, *extra)
                    output = step(batch, batch_idx, *extra)
                    for hook in on_end:
                        hook(output, batch, batch_idx, *extra)
                    if keep:
                        kept.append(output)
                predictions.append(kept)
        hooks.call("on_predict_epoch_end")
        hooks.call("on_predict_end")
        self._modes.restore()
        return predictions
