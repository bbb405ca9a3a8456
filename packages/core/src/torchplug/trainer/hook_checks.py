"""Hooks that nothing would call are refused before a run, and what a hook receives differently is announced.

A method a user defines but that no loop would ever call (a Lightning 1.x hook, an automatic-
optimization hook in manual optimization, a ``backward`` an engine bypasses...) would make a run
"succeed" with other results than the user meant, so the run is refused at its start, naming it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.precision.precision import Precision
from torchplug.trainer.hooks import is_overridden
from torchplug.utilities.warn import warn_once

if TYPE_CHECKING:
    from torchplug.strategies.strategy import Strategy

__all__ = ["BehaviourNoteWarning", "announce_differences", "verify_datamodule_hooks", "verify_hooks"]


class BehaviourNoteWarning(UserWarning):
    """A hook of this run is called with something Lightning users may not expect (README: "Coming from Lightning")."""


#: Hooks of Lightning 1.x that Lightning 2 no longer calls, and what replaces each.
_REMOVED_MODULE_HOOKS: Final = {
    "training_epoch_end": "on_train_epoch_end (keep the step outputs you need in an attribute)",
    "validation_epoch_end": "on_validation_epoch_end (keep the step outputs you need in an attribute)",
    "test_epoch_end": "on_test_epoch_end (keep the step outputs you need in an attribute)",
    "training_step_end": "the end of training_step",
    "validation_step_end": "the end of validation_step",
    "test_step_end": "the end of test_step",
    "on_epoch_start": "on_train_epoch_start, on_validation_epoch_start or on_test_epoch_start",
    "on_epoch_end": "on_train_epoch_end, on_validation_epoch_end or on_test_epoch_end",
    "on_batch_start": "on_train_batch_start",
    "on_batch_end": "on_train_batch_end",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_post_move_to_device": "setup or configure_model",
    "on_hpc_save": "on_save_checkpoint",
    "on_hpc_load": "on_load_checkpoint",
    "on_train_dataloader": "train_dataloader",
    "on_val_dataloader": "val_dataloader",
    "on_test_dataloader": "test_dataloader",
    "on_predict_dataloader": "predict_dataloader",
    "get_progress_bar_dict": "self.log(..., prog_bar=True)",
}
_REMOVED_CALLBACK_HOOKS: Final = {
    "on_init_start": "the callback's __init__",
    "on_init_end": "setup",
    "on_epoch_start": "on_train_epoch_start, on_validation_epoch_start or on_test_epoch_start",
    "on_epoch_end": "on_train_epoch_end, on_validation_epoch_end or on_test_epoch_end",
    "on_batch_start": "on_train_batch_start",
    "on_batch_end": "on_train_batch_end",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_configure_sharded_model": "setup",
    "on_before_accelerator_backend_setup": "setup",
    "on_keyboard_interrupt": "on_exception",
}
#: Hooks of a Lightning 1.x DataModule that Lightning 2 no longer calls, and what replaces each.
_REMOVED_DATAMODULE_HOOKS: Final = {
    "on_save_checkpoint": "state_dict (what it returns is saved in checkpoints)",
    "on_load_checkpoint": "load_state_dict",
    "on_train_dataloader": "train_dataloader",
    "on_val_dataloader": "val_dataloader",
    "on_test_dataloader": "test_dataloader",
    "on_predict_dataloader": "predict_dataloader",
}
#: Hooks of automatic optimization: in manual optimization nothing would call them.
_AUTOMATIC_ONLY: Final = ("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping", "on_before_zero_grad")


def verify_hooks(
    model: Module, callbacks: Iterable[Callback], strategy: Strategy, trainer_args: dict[str, Any], fitting: bool
) -> None:
    """Refuse, before anything runs, every hook or argument that would be defined but never honoured.

    Args:
        model: The module of the run.
        callbacks: The run's callbacks.
        strategy: The run's strategy (its precision may own the backward).
        trainer_args: ``accumulate_grad_batches`` and ``gradient_clip_val`` of the Trainer.
        fitting: Whether the run is a ``fit`` (the optimization hooks and arguments matter only then).

    Raises:
        MisconfigurationError: Naming each such hook or argument, and what to do instead.
    """
    problems = [f"{type(model).__name__}.{name}: {why}" for name, why in _module_problems(model, strategy, fitting)]
    for callback in callbacks:
        problems += [
            f"{type(callback).__name__}.{name}: a Lightning 1.x hook that no longer exists: nothing calls it. "
            f"Hint: use {hint}."
            for name, hint in _REMOVED_CALLBACK_HOOKS.items()
            if callable(getattr(callback, name, None))
        ]
    if fitting and not model.automatic_optimization:
        if trainer_args["accumulate_grad_batches"] != 1:
            problems.append(
                f"Trainer(accumulate_grad_batches={trainer_args['accumulate_grad_batches']}) with manual optimization: "
                "the Trainer does not step your optimizers. Hint: accumulate in training_step, or remove the argument."
            )
        if trainer_args["gradient_clip_val"]:
            problems.append(
                f"Trainer(gradient_clip_val={trainer_args['gradient_clip_val']}) with manual optimization: the Trainer "
                "does not step your optimizers. Hint: call self.clip_gradients(optimizer, ...) before "
                "optimizer.step(), or remove the argument."
            )
    if problems:
        raise MisconfigurationError(
            "These would be silently ignored, so the run is refused:\n  - " + "\n  - ".join(problems)
        )


def _module_problems(model: Module, strategy: Strategy, fitting: bool) -> list[tuple[str, str]]:
    problems = [
        (name, f"a Lightning 1.x hook that no longer exists: nothing calls it. Hint: use {hint}.")
        for name, hint in _REMOVED_MODULE_HOOKS.items()
        if callable(getattr(model, name, None))
    ]
    if is_overridden(model, "configure_sharded_model", Module) and is_overridden(model, "configure_model", Module):
        problems.append(  # refused by every call, as Lightning does (it raises a RuntimeError)
            ("configure_sharded_model", "configure_model is overridden too; the older name is an alias of it. Hint: "
             "keep configure_model only.")
        )  # fmt: skip
    if not fitting:
        return problems
    overridden = [name for name in _hook_names() if is_overridden(model, name, Module)]
    problems += [
        (name, "its signature has optimizer_idx, from Lightning 1.x; the hook is called without it. Hint: remove "
         "the optimizer_idx parameter.")
        for name in overridden
        if "optimizer_idx" in _parameters(getattr(model, name))
    ]  # fmt: skip
    if not model.automatic_optimization:
        problems += [
            (name, "a hook of automatic optimization, never called with automatic_optimization = False. Hint: do "
             "this work in training_step, or remove it.")
            for name in _AUTOMATIC_ONLY
            if name in overridden
        ]  # fmt: skip
    precision = strategy.precision
    if "backward" in overridden and precision is not None and is_overridden(precision, "backward", Precision):
        problems.append(
            ("backward", f"{type(precision).__name__} computes the gradients itself (its engine owns the backward), "
             "so this override would not run. Hint: remove it, or use another precision or strategy.")
        )  # fmt: skip
    return problems


def _hook_names() -> list[str]:
    """The public methods of :class:`Module` a user may override."""
    return [name for name, value in vars(Module).items() if not name.startswith("_") and callable(value)]


def _parameters(function: Any) -> Iterable[str]:
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return ()


def announce_differences(model: Module, callbacks: Iterable[Callback], strategy: Strategy) -> None:
    """Warn once about what a hook of this ``fit`` receives differently from what Lightning users may expect.

    ``on_before_backward`` gets the loss as ``training_step`` returned it, before a precision that
    scales the loss (``16-mixed``) scales it.
    """
    precision = strategy.precision
    if precision is None or not is_overridden(precision, "pre_backward", Precision):
        return
    owners = [type(model).__name__] if is_overridden(model, "on_before_backward", Module) else []
    owners += [type(c).__name__ for c in callbacks if is_overridden(c, "on_before_backward", Callback)]
    if owners:
        warn_once(
            f"on_before_backward ({', '.join(owners)}) receives the loss before {type(precision).__name__} scales it "
            "for the backward (the loss training_step returned). See the README, 'Coming from Lightning'.",
            BehaviourNoteWarning,
        )


def verify_datamodule_hooks(datamodule: DataModule) -> None:
    """Refuse the Lightning 1.x hooks of a DataModule, and name the Module or Callback hooks it defines.

    Neither is ever called on a DataModule. A removed hook is refused, as on modules and callbacks;
    a hook of a Module or Callback (``on_train_epoch_start``...) is warned about: Lightning ignores
    it too, and it may be a helper that the user's own code calls.

    Raises:
        MisconfigurationError: Naming each removed hook and what replaces it.
    """
    cls = type(datamodule)
    defined = [name for name in dir(cls) if name.startswith("on_") and callable(getattr(cls, name, None))]
    removed = [name for name in defined if name in _REMOVED_DATAMODULE_HOOKS]
    if removed:
        raise MisconfigurationError(
            "These would be silently ignored, so the run is refused:\n  - "
            + "\n  - ".join(
                f"{cls.__name__}.{name}: a Lightning 1.x DataModule hook that no longer exists: nothing calls it. "
                f"Hint: use {_REMOVED_DATAMODULE_HOOKS[name]}."
                for name in removed
            )
        )
    elsewhere = [
        name for name in defined if not hasattr(DataModule, name) and (hasattr(Module, name) or hasattr(Callback, name))
    ]
    if elsewhere:
        warn_once(
            f"{cls.__name__} defines {', '.join(elsewhere)}: hooks of a Module or Callback, which are never called on "
            "a DataModule. Hint: move them to the Module or to a Callback (or rename them if your own code calls "
            "them)."
        )
