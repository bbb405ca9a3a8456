"""``LambdaCallback``: a callback made of plain functions, one per hook."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback

__all__ = ["LambdaCallback"]

#: Every hook a LambdaCallback can take: the Callback base class's methods, but its state methods.
HOOKS = tuple(
    name
    for name, member in inspect.getmembers(Callback, inspect.isfunction)
    if not name.startswith("_") and name not in ("state_dict", "load_state_dict")
)


class LambdaCallback(Callback):
    """Give each hook as a function: ``LambdaCallback(on_train_epoch_end=lambda trainer, module: ...)``.

    Each function takes the hook's arguments (the Trainer, the Module, then the hook's own). Only
    the hooks given run, so the others cost nothing.

    Example:
        >>> Trainer(callbacks=[LambdaCallback(on_fit_start=lambda trainer, module: print("start"))])

    Args:
        **hooks: Hook name to function (``setup``, ``on_train_batch_end``, any hook of
            :class:`torchplug.Callback`).

    Raises:
        MisconfigurationError: A name that is not a hook, or a value that is not callable.
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        for name, function in hooks.items():
            if name not in HOOKS:
                raise MisconfigurationError(
                    f"LambdaCallback({name}=...): {name!r} is not a Callback hook. Hooks: {', '.join(HOOKS)}."
                )
            if not callable(function):
                raise MisconfigurationError(f"LambdaCallback({name}={function!r}): give a function.")
            setattr(self, name, function)  # on the instance: the Trainer calls it like an override
