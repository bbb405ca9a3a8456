"""``save_hyperparameters``: collecting a class's init arguments, keeping what a checkpoint can hold."""

from __future__ import annotations

import difflib
import inspect
import types
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AttributeDict", "checkpoint_safe", "collect_init_args"]


class AttributeDict(dict[str, Any]):
    """A dict whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(f"No hyperparameter {key!r}; saved: {', '.join(self) or '(none)'}") from exc

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def collect_init_args(
    frame: types.FrameType, obj: object, names: tuple[Any, ...], ignore: Iterable[str]
) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` (selected by ``names``), minus ``ignore``.

    ``names`` may be empty (every argument), strings (those arguments), or one mapping or
    namespace given directly (its items).
    """
    if len(names) == 1 and not isinstance(names[0], str):
        given = names[0]
        return dict(given if isinstance(given, Mapping) else vars(given))
    info = inspect.getargvalues(frame)
    values = {name: info.locals[name] for name in info.args[1:]}  # the first is self
    if info.varargs:
        values[info.varargs] = info.locals[info.varargs]
    if info.keywords:
        values.update(info.locals[info.keywords])
    if names:
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(
                f"save_hyperparameters({', '.join(map(repr, names))}): {missing} are not arguments of "
                f"{type(obj).__name__}.__init__; its arguments are {', '.join(values) or '(none)'}."
            )
        values = {n: values[n] for n in names}
    ignored = set(ignore)
    unknown = sorted(ignored - set(values))
    if unknown and not info.keywords:  # with **kwargs, a name may be a keyword not given this time
        close = [m for name in unknown for m in difflib.get_close_matches(name, list(values), n=1, cutoff=0.75)]
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        arguments = ", ".join(values) or "(none)"
        warnings.warn(
            f"{type(obj).__name__}.save_hyperparameters(ignore={sorted(ignored)!r}): {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} not an argument of {type(obj).__name__}.__init__, so nothing is "
            f"left out for {'it' if len(unknown) == 1 else 'them'}.{hint} Its arguments: {arguments}.",
            UserWarning,
            stacklevel=3,
        )
    return {k: v for k, v in values.items() if k not in ignored and not k.startswith("__")}


_SAFE_SCALARS = (bool, int, float, str, type(None))


def checkpoint_safe(value: Any) -> bool:
    """Whether ``value`` loads with ``torch.load(weights_only=True)`` (plain data only)."""
    if isinstance(value, _SAFE_SCALARS):
        return True
    if isinstance(value, (list, tuple)):
        return all(checkpoint_safe(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and checkpoint_safe(v) for k, v in value.items())
    return False


def split_unsafe(hparams: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """The checkpoint-safe part of ``hparams``; warns once about what is left out and why."""
    unsafe = [k for k, v in hparams.items() if not checkpoint_safe(v)]
    if unsafe:
        warnings.warn(
            f"{owner}.save_hyperparameters: {', '.join(unsafe)} are not plain data (numbers, strings, lists, dicts), "
            "so they are not written to checkpoints. Hint: pass ignore=[...] for them, and give them again to "
            "load_from_checkpoint(...).",
            stacklevel=3,
        )
    return {k: v for k, v in hparams.items() if k not in unsafe}
