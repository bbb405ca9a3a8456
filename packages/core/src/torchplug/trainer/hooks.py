"""Calling the hooks of the callbacks and the module: found by override, bound once per run.

A hook runs only where somebody overrides it. Overrides are found by comparing the class
attribute with the base class's (:func:`is_overridden`), never by a bound method's ``__name__``,
so a hook wrapped by a decorator without ``functools.wraps`` still runs. The lists the loops
call per batch are built once per run and handed to them; a hook nobody overrides costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchplug.callbacks.callback import Callback
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.utilities.model_helpers import overrides as is_overridden  # the one implementation, (obj, name, base)

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["HookRunner", "is_overridden"]

Hook = Callable[..., Any]


class HookRunner:
    """Runs hooks in the order every loop uses: callbacks first, then the module.

    Callbacks that monitor metrics (``ModelCheckpoint``, ``EarlyStopping``) can be run apart from
    the others (``monitoring=True``/``False``), so that the epoch-end hooks of the module run
    between the two groups and checkpoints see what the module logged.

    Args:
        trainer: The Trainer whose callbacks and module the hooks belong to.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self._cache: dict[tuple[str, bool | None], list[Hook]] = {}
        #: The run's profiler: when it is active, every hook bound from now on is timed by it.
        self.profiler: Any = None

    def reset(self) -> None:
        """Forget the bound lists (at the start of a run: the module or the callbacks may have changed)."""
        self._cache.clear()

    def callbacks(self, name: str, monitoring: bool | None = None) -> list[Hook]:
        """The bound ``name`` hooks of the callbacks that override it (each takes the hook's own arguments).

        Args:
            name: The hook, for example ``"on_train_batch_end"``.
            monitoring: True: only the metric-monitoring callbacks; False: only the others; None: all.
        """
        key = (name, monitoring)
        hooks = self._cache.get(key)
        if hooks is None:
            trainer = self._trainer
            hooks = self._cache[key] = [
                self._timed(
                    f"[Callback]{callback.state_key}.{name}",
                    functools.partial(getattr(callback, name), trainer, trainer.module),
                )
                for callback in trainer.callbacks
                if is_overridden(callback, name, Callback)
                and (monitoring is None or getattr(callback, "monitors_metrics", False) is monitoring)
            ]
        return hooks

    def module_hook(self, name: str) -> Hook | None:
        """The module's bound ``name`` hook when the module overrides it, else None."""
        module = self._trainer.module
        if not is_overridden(module, name, Module):
            return None
        return self._timed(f"[Module]{type(module).__name__}.{name}", getattr(module, name))

    def _timed(self, action: str, hook: Hook) -> Hook:
        """``hook`` itself, or timed by the profiler when one is active (decided as the hook is bound)."""
        profiler = self.profiler
        if profiler is None or not profiler.active:
            return hook
        timed: Hook = profiler.wrap(action, hook)
        return timed

    def datamodule_hook(self, name: str) -> Hook | None:
        """The datamodule's bound ``name`` hook when there is a datamodule and it overrides it, else None."""
        datamodule = self._trainer.datamodule
        if datamodule is None or not is_overridden(datamodule, name, DataModule):
            return None
        hook: Hook = getattr(datamodule, name)
        return hook

    def batch_hooks(self, name: str) -> list[Hook]:
        """The callbacks' then the module's ``name`` hooks, for a loop to call per batch with the hook's arguments."""
        module_hook = self.module_hook(name)
        hooks = self.callbacks(name)
        return [*hooks, module_hook] if module_hook is not None else hooks

    def call(self, name: str, *args: Any, monitoring: bool | None = None, **kwargs: Any) -> None:
        """Run ``name`` on the callbacks, then on the module (the module runs with the non-monitoring group).

        ``kwargs`` go by keyword where Lightning passes them so (``setup``/``teardown``: ``stage=``), so a
        hook written for Lightning (``def setup(self, trainer, pl_module, **kwargs)``) gets them the same way.
        """
        for hook in self.callbacks(name, monitoring):
            hook(*args, **kwargs)
        if monitoring is not True:
            module_hook = self.module_hook(name)
            if module_hook is not None:
                module_hook(*args, **kwargs)

    def call_module(self, name: str, *args: Any) -> Any:
        """Run the module's ``name`` hook (its default when not overridden) and return its result."""
        return getattr(self._trainer.module, name)(*args)
