"""Building the Trainer's callback list: the user's, the defaults, the model's own, in a fixed order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.trainer.hooks import is_overridden
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from torchplug.core.module import Module

__all__ = ["add_feature_callbacks", "attach_model_callbacks", "build_callbacks", "check_state_keys", "ordered"]


def _as_callbacks(callbacks: Callback | Iterable[Callback] | None, what: str) -> list[Callback]:
    given = [callbacks] if isinstance(callbacks, Callback) else list(callbacks or [])
    seen: set[int] = set()
    for callback in given:
        if not isinstance(callback, Callback):
            raise MisconfigurationError(f"{what} holds {callback!r}, which is not a torchplug Callback.")
        if id(callback) in seen:  # every hook of it would run twice per event
            raise MisconfigurationError(
                f"{what} holds the same {type(callback).__name__} object twice, so each of its hooks would run "
                "twice. Hint: list it once (or make two instances if two are meant)."
            )
        seen.add(id(callback))
    return given


def build_callbacks(
    callbacks: Callback | Iterable[Callback] | None,
    enable_checkpointing: bool | None,
    enable_progress_bar: bool | None,
    fast_dev_run: int,
    barebones: bool = False,
) -> list[Callback]:
    """The Trainer's callbacks: those given, plus a ModelCheckpoint and a TQDMProgressBar unless disabled.

    ``barebones``: the flags are False because ``barebones=True`` turned them off (said so in errors).

    Raises:
        MisconfigurationError: A non-callback in the list, a callback that a ``False`` flag forbids, or two
            callbacks with state under one ``state_key`` (see :func:`check_state_keys`).
    """
    from torchplug.callbacks.model_checkpoint import ModelCheckpoint
    from torchplug.callbacks.progress import ProgressBar
    from torchplug.callbacks.tqdm_progress import TQDMProgressBar

    given = _as_callbacks(callbacks, "callbacks=")
    if enable_checkpointing is False:
        _refuse_switched_off(given, ModelCheckpoint, "enable_checkpointing=False", barebones)
    if enable_progress_bar is False:
        _refuse_switched_off(given, ProgressBar, "enable_progress_bar=False", barebones)
    has_checkpoint = any(isinstance(c, ModelCheckpoint) for c in given)
    if enable_checkpointing is not False and not fast_dev_run and not has_checkpoint:
        given.append(ModelCheckpoint())
    if enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in given):
        given.append(TQDMProgressBar())
    check_state_keys(given, "callbacks=")
    return ordered(given)


def _refuse_switched_off(given: list[Callback], kind: type, flag: str, barebones: bool) -> None:
    """Refuse a callback of ``kind`` in ``callbacks=`` when ``flag`` (or ``barebones=True``) turned its feature off."""
    found = next((c for c in given if isinstance(c, kind)), None)
    if found is None:
        return
    name = type(found).__name__
    if barebones:
        raise MisconfigurationError(
            f"Trainer(barebones=True) turns off what {name} does (it can cost speed), but callbacks= holds a "
            f"{name}. Hint: remove the {name}, or barebones=True."
        )
    raise MisconfigurationError(f"{flag}, but callbacks= holds a {name}. Remove one of them.")


def add_feature_callbacks(
    callbacks: list[Callback], model_summary: bool | None, max_time: Any, barebones: bool = False
) -> list[Callback]:
    """Add the callbacks behind Trainer flags: a ModelSummary (``enable_model_summary``), a Timer (``max_time``).

    A callback of the same type given by the user is kept instead (a ``Timer`` given with
    ``max_time=`` too is kept, and ``max_time`` unused, said at the info level as Lightning does; a
    ``ModelSummary`` under ``barebones=True`` is an error; with ``enable_model_summary=False`` it is
    kept, with a warning, as Lightning keeps it).
    """
    from torchplug.callbacks.model_summary import ModelSummary
    from torchplug.callbacks.timer import Timer, parse_duration

    added: list[Callback] = []
    given_summary = next((c for c in callbacks if isinstance(c, ModelSummary)), None)
    if barebones:
        _refuse_switched_off(callbacks, ModelSummary, "barebones=True", barebones)
    elif model_summary is False and given_summary is not None:  # the callback given is honoured, as in Lightning
        name = type(given_summary).__name__
        rank_zero_warn(
            f"enable_model_summary=False turns off only the default summary: the {name} in callbacks= still "
            f"prints one when fitting starts. Hint: remove the {name} from callbacks= to print none."
        )
    elif model_summary is not False and given_summary is None:
        added.append(ModelSummary())
    if max_time is not None:
        parse_duration(max_time, "max_time")  # refused in the user's words: max_time=...
        given_timer = next((c for c in callbacks if isinstance(c, Timer)), None)
        if given_timer is None:
            added.append(Timer(max_time))
        else:  # the callback given is honoured, as in Lightning, and said so
            limit = "no limit" if given_timer.duration is None else f"a limit of {given_timer.duration:g} s"
            rank_zero_info(
                f"max_time={max_time!r} is not used: callbacks= holds a {type(given_timer).__name__} ({limit}), "
                "which keeps its own. Hint: remove max_time=, or the Timer, to have one limit."
            )
    return ordered(callbacks + added) if added else callbacks


def attach_model_callbacks(callbacks: list[Callback], module: Module) -> list[Callback]:
    """Add the module's ``configure_callbacks()``: each replaces the Trainer's callbacks of its type.

    Returns the new, ordered list (the Trainer's list is not changed in place).

    Raises:
        MisconfigurationError: Two callbacks with state under one ``state_key`` (see :func:`check_state_keys`).
    """
    model_callbacks = _as_callbacks(module.configure_callbacks(), f"{type(module).__name__}.configure_callbacks()")
    if not model_callbacks:
        return callbacks
    types = {type(c) for c in model_callbacks}
    replaced = sorted({type(c).__name__ for c in callbacks if type(c) in types})
    if replaced:
        rank_zero_info(
            "The model's configure_callbacks() replaces the Trainer's callbacks of type %s.", ", ".join(replaced)
        )
    kept = [c for c in callbacks if type(c) not in types]
    check_state_keys(kept + model_callbacks, f"callbacks= with {type(module).__name__}.configure_callbacks()")
    return ordered(kept + model_callbacks)


def check_state_keys(callbacks: list[Callback], what: str) -> None:
    """Refuse two callbacks that keep state (override ``state_dict``) under one ``state_key``.

    A checkpoint holds one state per key: it would keep only the last one's, and a resumed fit
    would give that state to both.

    Raises:
        MisconfigurationError: Naming the key and the two callbacks.
    """
    seen: dict[str, Callback] = {}
    for callback in callbacks:
        if not is_overridden(callback, "state_dict", Callback):
            continue
        key = callback.state_key
        first = seen.setdefault(key, callback)
        if first is not callback:
            raise MisconfigurationError(
                f"{what} holds {first!r} and {callback!r}, which both keep their state in checkpoints under "
                f"state_key={key!r}: a checkpoint would hold only one of the two states, and a resumed fit would "
                "give it to both. Hint: make them differ in a setting the key names, keep one of them, or "
                "subclass one and override state_key."
            )


def ordered(callbacks: list[Any]) -> list[Any]:
    """Metric-monitoring callbacks (checkpointing, early stopping) run after the others; checkpoints last."""
    from torchplug.callbacks.model_checkpoint import ModelCheckpoint

    others = [c for c in callbacks if not getattr(c, "monitors_metrics", False)]
    monitors = [c for c in callbacks if getattr(c, "monitors_metrics", False) and not isinstance(c, ModelCheckpoint)]
    checkpoints = [c for c in callbacks if isinstance(c, ModelCheckpoint)]
    return others + monitors + checkpoints
