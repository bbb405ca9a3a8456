"""Validation, test and predict loops: no gradients, every dataloader in turn, hooks around each batch."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from torchplug.trainer.states import RunningStage

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["run_evaluation", "run_prediction"]

# stage -> (module step, hook infix, metric store)
_STAGES: dict[RunningStage, tuple[str, str, str]] = {
    RunningStage.SANITY_CHECKING: ("validation_step", "validation", "sanity_check"),
    RunningStage.VALIDATING: ("validation_step", "validation", "validate"),
    RunningStage.TESTING: ("test_step", "test", "test"),
}


def _accepts_dataloader_idx(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return "dataloader_idx" in parameters or any(p.kind is p.VAR_POSITIONAL for p in parameters.values())


def _grad_context(trainer: Trainer) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if trainer.inference_mode else torch.no_grad()


def run_evaluation(
    trainer: Trainer,
    stage: RunningStage,
    loaders: list[Any],
    limits: list[float],
    after_batches: Callable[[], None] | None = None,
) -> list[dict[str, float]]:
    """Run ``validation_step`` or ``test_step`` over ``loaders``; return the epoch metrics per dataloader.

    ``after_batches`` runs once every batch is done, before the epoch-end hooks (where checkpoints
    may be written): the fit loop marks its position there, so a resume does not validate again.
    """
    step_name, infix, store = _STAGES[stage]
    strategy, module, results = trainer.strategy, trainer.module, trainer._results
    run_step = getattr(strategy, step_name)
    with_idx = len(loaders) > 1 and _accepts_dataloader_idx(getattr(module, step_name))
    trainer.state.stage = stage
    was_training = module.training
    module.eval()
    hook_prefix = "validation" if stage is RunningStage.SANITY_CHECKING else infix
    per_loader: list[dict[str, float]] = []
    results.set_stage(store, reset=True)
    results.defaults = (False, True)
    trainer._call_hooks(f"on_{hook_prefix}_start")
    trainer._call_hooks(f"on_{hook_prefix}_epoch_start")
    on_start = trainer._hook_list(f"on_{hook_prefix}_batch_start", (getattr(module, f"on_{hook_prefix}_batch_start"),))
    on_end = trainer._hook_list(f"on_{hook_prefix}_batch_end", (getattr(module, f"on_{hook_prefix}_batch_end"),))
    with _grad_context(trainer):
        for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
            results.suffix = f"/dataloader_idx_{loader_idx}" if len(loaders) > 1 else ""
            extra = {"dataloader_idx": loader_idx} if with_idx else {}
            hook_extra = (loader_idx,) if len(loaders) > 1 else ()
            for batch_idx, batch in enumerate(loader):
                if batch_idx >= limit:
                    break
                batch = strategy.batch_to_device(batch)
                results.new_batch(batch)
                for hook in on_start:
                    hook(batch, batch_idx, *hook_extra)
                outputs = run_step(batch, batch_idx, **extra)
                for hook in on_end:
                    hook(outputs, batch, batch_idx, *hook_extra)
    results.suffix = ""
    if after_batches is not None:
        after_batches()
    trainer._call_hooks(f"on_{hook_prefix}_epoch_end", monitoring=False)
    results.compute_epoch(store)
    metrics = results.epoch_metrics(store)
    per_loader = _split_by_loader(metrics, len(loaders))
    if stage is not RunningStage.SANITY_CHECKING:
        trainer._log_metrics(metrics)
    trainer._call_hooks(f"on_{hook_prefix}_epoch_end", monitoring=True)
    trainer._call_hooks(f"on_{hook_prefix}_end")
    if was_training:
        module.train()
    return per_loader


def _split_by_loader(metrics: dict[str, float], count: int) -> list[dict[str, float]]:
    if count <= 1:
        return [dict(metrics)]
    out: list[dict[str, float]] = [{} for _ in range(count)]
    for key, value in metrics.items():
        for idx in range(count):
            if key.endswith(f"/dataloader_idx_{idx}"):
                out[idx][key] = value
    return out


def run_prediction(trainer: Trainer, loaders: list[Any], limits: list[float], keep: bool) -> list[list[Any]]:
    """Run ``predict_step`` over ``loaders``; return the predictions per dataloader (when ``keep``)."""
    strategy, module = trainer.strategy, trainer.module
    with_idx = len(loaders) > 1 and _accepts_dataloader_idx(module.predict_step)
    trainer.state.stage = RunningStage.PREDICTING
    module.eval()
    trainer._call_hooks("on_predict_start")
    trainer._call_hooks("on_predict_epoch_start")
    on_start = trainer._hook_list("on_predict_batch_start", (module.on_predict_batch_start,))
    on_end = trainer._hook_list("on_predict_batch_end", (module.on_predict_batch_end,))
    predictions: list[list[Any]] = []
    with _grad_context(trainer):
        for loader_idx, (loader, limit) in enumerate(zip(loaders, limits)):
            extra = {"dataloader_idx": loader_idx} if with_idx else {}
            hook_extra = (loader_idx,) if len(loaders) > 1 else ()
            kept: list[Any] = []
            for batch_idx, batch in enumerate(loader):
                if batch_idx >= limit:
                    break
                batch = strategy.batch_to_device(batch)
                for hook in on_start:
                    hook(batch, batch_idx, *hook_extra)
                output = strategy.predict_step(batch, batch_idx, **extra)
                for hook in on_end:
                    hook(output, batch, batch_idx, *hook_extra)
                if keep:
                    kept.append(output)
            predictions.append(kept)
    trainer._call_hooks("on_predict_epoch_end")
    trainer._call_hooks("on_predict_end")
    return predictions
