"""Whether a model, data module or callback overrides a method of its base class (``is_overridden``).

One implementation serves the Trainer (which runs only the hooks somebody overrides) and user code
(``from torchplug.utilities.model_helpers import is_overridden``). This module imports nothing of
torchplug: the base classes are found among the modules already loaded.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Final

__all__ = ["is_overridden", "overrides"]

#: The bases ``is_overridden`` infers when none is given: (module, class), tried in this order.
_DEFAULT_PARENTS: Final = (
    ("torchplug.core.module", "Module"),
    ("torchplug.core.datamodule", "DataModule"),
    ("torchplug.callbacks.callback", "Callback"),
)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance`` overrides ``parent``'s method ``method_name``.

    An override is a method its class (or a class between it and ``parent``) defines, or a
    callable set on the instance itself; a wrapper that only wraps ``parent``'s own method
    (``functools.wraps``, ``functools.partial``) is not one.

    Example:
        >>> is_overridden("training_step", model)  # parent: Module, inferred
        True

    Args:
        method_name: The method, for example ``"training_step"`` or ``"on_train_epoch_end"``.
        instance: The object (or class) to ask about; None answers False (a Trainer without a module).
        parent: The base class; None infers it when ``instance`` is a :class:`~torchplug.Module`,
            :class:`~torchplug.DataModule` or :class:`~torchplug.Callback`.

    Raises:
        ValueError: ``parent`` is None and ``instance`` is none of those three kinds, or ``instance``
            has ``method_name`` and ``parent`` does not define it.
    """
    if instance is None:
        return False
    if parent is None:
        parent = _default_parent(instance)
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, {type(instance).__name__} object) needs a parent: the class whose "
                "method an override replaces. Hint: pass parent=..., or give a Module, DataModule or Callback."
            )
    if getattr(instance, method_name, None) is None:
        return False
    if getattr(parent, method_name, None) is None:
        raise ValueError(
            f"is_overridden({method_name!r}, parent={parent.__name__}): {parent.__name__} defines no "
            f"{method_name!r}, so nothing can override it. Hint: check the method's name, or the parent class."
        )
    return overrides(instance, method_name, parent)


def overrides(obj: object, name: str, base: type) -> bool:
    """Whether ``obj`` (an instance or a class) has its own ``name`` rather than ``base``'s.

    Its class's attribute is compared with ``base``'s, so an override wrapped in a decorator (with
    or without ``functools.wraps``) stays an override. An attribute set on the instance is one too,
    unless it only wraps ``base``'s method (a profiler's or a test's wrapper around the default).
    ``None`` in its place, on the instance (``model.validation_step = None``) or the class, is no
    override: it turns the hook or step off, as in Lightning.
    """
    if isinstance(obj, type):
        attribute = getattr(obj, name, None)
        return attribute is not None and attribute is not getattr(base, name, None)
    own = getattr(obj, "__dict__", {})
    if name in own:
        value = own[name]
        return value is not None and _unwrapped(value) is not getattr(base, name, None)
    attribute = getattr(type(obj), name, None)
    return attribute is not None and attribute is not getattr(base, name, None)


def _unwrapped(value: Any) -> Any:
    """The function a wrapper set on an instance calls: through ``partial``, ``__wrapped__`` and bound methods."""
    for _ in range(32):  # a bound on the chain, in case a wrapper points at itself
        if isinstance(value, functools.partial):
            value = value.func
        elif hasattr(value, "__wrapped__"):
            value = value.__wrapped__
        elif hasattr(value, "__func__"):
            value = value.__func__
        else:
            break
    return value


def _default_parent(instance: object) -> type | None:
    """The torchplug base ``instance`` derives from; a base whose module is not loaded has no instances yet."""
    cls = instance if isinstance(instance, type) else type(instance)
    for module_name, class_name in _DEFAULT_PARENTS:
        base = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(base, type) and issubclass(cls, base):
            return base
    return None
