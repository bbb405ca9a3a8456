"""Checking the Trainer's loop arguments at construction: a bad value is an error naming it, never a default.

Each check returns the value normalised (``fast_dev_run=True`` becomes 1, ``gradient_clip_algorithm=None``
becomes ``"norm"``) or raises :class:`MisconfigurationError` quoting the argument, the value given
and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
from datetime import timedelta
from typing import Any, Final, cast

from torchplug._errors import MisconfigurationError

__all__ = [
    "announce_batch_limits",
    "check_barebones",
    "check_bool",
    "check_clip_algorithm",
    "check_clip_val",
    "check_fast_dev_run",
    "check_int",
    "check_limit",
    "check_nonfinite_loss",
    "check_root_dir",
    "check_val_check_interval",
    "parse_duration",
    "warn_if_minimum_above_maximum",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int, allow: tuple[Any, ...] = (), expected: str = "") -> Any:
    """An int of at least ``minimum``, or one of the ``allow`` values (None, -1...).

    ``expected`` replaces the description of the valid values in the error message.
    """
    if any(value is a or (a is not None and _is_int(value) and value == a) for a in allow):
        return value
    if not _is_int(value) or value < minimum:
        if not expected:
            expected = "give a positive int" if minimum == 1 else f"give an int >= {minimum}"
            expected += f" or one of {allow}" if allow else ""
            raise MisconfigurationError(f"{name}={value!r} is not valid: {expected}.")
        raise MisconfigurationError(f"{name}={value!r}: {expected}.")
    return value


def check_bool(name: str, value: Any, allow: tuple[Any, ...] = ()) -> Any:
    """True or False (or one of ``allow``: None leaves the setting as it is)."""
    if isinstance(value, bool) or any(value is a or (isinstance(a, str) and value == a) for a in allow):
        return value
    named = [repr(a) for a in allow if a is not None]
    choices = "True, False" + (f" or {' or '.join(named)}" if named else "")
    raise MisconfigurationError(f"{name}={value!r}: choose {choices}.")


def check_fast_dev_run(value: Any) -> int:
    """``fast_dev_run``: True (one batch), False (off), or a positive int of batches."""
    if isinstance(value, bool):
        return int(value)
    if _is_int(value) and value >= 0:
        return int(value)
    raise MisconfigurationError(
        f"fast_dev_run={value!r} is not valid: give True, False or a positive int (the number of batches)."
    )


def check_limit(name: str, value: Any) -> int | float | None:
    """``limit_*_batches``: None, an int count of batches, or a float fraction in [0.0, 1.0]."""
    if value is None or (_is_int(value) and value >= 0):
        return cast("int | None", value)  # an int, narrowed by _is_int
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return value
    if isinstance(value, float) and value > 1.0:
        raise MisconfigurationError(f"{name}={value!r}: a float is a fraction of the batches, at most 1.0.")
    raise MisconfigurationError(f"{name}={value!r}: give an int (batches) or a float between 0.0 and 1.0.")


_DURATION = re.compile(r"(\d+):(\d+):(\d+):(\d+)")  # any number of digits per field, as Lightning reads them


def parse_duration(value: Any, what: str = "max_time") -> timedelta:
    """A duration from ``"DD:HH:MM:SS"``, a dict of ``timedelta`` arguments (``{"hours": 1}``), or a ``timedelta``.

    Each field of the string may have any number of digits (``"0:1:30:0"``, ``"00:36:00:00"``).

    Raises:
        MisconfigurationError: Anything else, or a negative duration, naming ``what`` and the value.
    """
    duration: timedelta | None = None
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match is not None:
            days, hours, minutes, seconds = (int(group) for group in match.groups())
            duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        try:
            duration = timedelta(**value)
        except TypeError as exc:
            raise MisconfigurationError(
                f"{what}={value!r}: the dict's keys must be timedelta arguments (days, hours, minutes, seconds...): "
                f"{exc}. Hint: for example {{'hours': 12}}."
            ) from exc
    if duration is None:
        raise MisconfigurationError(
            f'{what}={value!r} is not a duration: give "DD:HH:MM:SS" (for example "00:12:00:00"), a dict such as '
            '{"hours": 12}, or a datetime.timedelta. Hint: a number of seconds is {"seconds": n}.'
        )
    if duration.total_seconds() < 0:
        raise MisconfigurationError(f"{what}={value!r} is negative. Hint: give a duration >= 0.")
    return duration


#: What a limit of exactly 1 (an int: one batch) or 1.0 (a float: all of them) means, per argument.
_ONE_MEANS: Final = {
    "limit_train_batches": ("1 batch per epoch will be used.", "100% of the batches per epoch will be used."),
    "val_check_interval": (
        "validation will run after every batch.",
        "validation will run at the end of the training epoch.",
    ),
}
_ONE_MEANS_OTHERWISE: Final = ("1 batch will be used.", "100% of the batches will be used.")


def announce_batch_limits(fast_dev_run: int, overfit_batches: float, **given: Any) -> None:
    """Say at the info level, once per Trainer, what a development run or a limit of 1 or 1.0 means.

    ``1`` (one batch) and ``1.0`` (all of them) differ only by their type, so the Trainer spells
    out which one it read, as Lightning does. ``fast_dev_run`` replaces the limits (one line for
    it); ``overfit_batches`` replaces the train and validation limits.

    Args:
        fast_dev_run: The checked ``fast_dev_run`` (0: off).
        overfit_batches: The checked ``overfit_batches`` (0: off).
        **given: The user's ``limit_*_batches`` and ``val_check_interval``, by name (None: not given; a time
            ``val_check_interval`` is said nothing of).
    """
    from torchplug.utilities.rank_zero import rank_zero_info

    if fast_dev_run:
        rank_zero_info(
            f"Running in `fast_dev_run` mode: will run the requested loop using {fast_dev_run} batch(es). "
            "Logging and checkpointing is suppressed."
        )
        return
    for name, value in given.items():
        if overfit_batches and name in ("limit_train_batches", "limit_val_batches"):
            continue
        one, all_of_them = _ONE_MEANS.get(name, _ONE_MEANS_OTHERWISE)
        if _is_int(value) and value == 1:
            rank_zero_info(f"`Trainer({name}=1)` was configured so {one}")
        elif isinstance(value, float) and value == 1.0:
            rank_zero_info(f"`Trainer({name}=1.0)` was configured so {all_of_them}")


def check_val_check_interval(value: Any) -> int | float | timedelta:
    """``val_check_interval``: a float fraction of an epoch in (0.0, 1.0], a positive int of batches, or a time.

    A time (``"DD:HH:MM:SS"``, a dict of ``timedelta`` arguments, a ``timedelta``) is returned as a
    ``timedelta``: validation runs after the first batch that ends that long after training
    started or after the last validation, as in Lightning.
    """
    if value is None:
        return 1.0
    if isinstance(value, float) and 0.0 < value <= 1.0:
        return value
    if _is_int(value) and value >= 1:
        return int(value)
    if isinstance(value, (str, dict, timedelta)):
        return parse_duration(value, "val_check_interval")
    raise MisconfigurationError(
        f"val_check_interval={value!r} is not valid: give a float fraction of an epoch in (0.0, 1.0], a positive "
        'int number of training batches, or a time between validations ("DD:HH:MM:SS", {"minutes": 30} or a '
        "datetime.timedelta)."
    )


def check_clip_val(value: Any) -> float | None:
    """``gradient_clip_val``: None or 0 (no clipping), or a positive, finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MisconfigurationError(
            f"gradient_clip_val={value!r} is not valid: give a positive number, or None (or 0) for no clipping."
        )
    if value == 0:
        return None
    if not (math.isfinite(value) and value > 0):
        raise MisconfigurationError(
            f"gradient_clip_val={value!r} is not valid: a clipping threshold must be a positive, finite number "
            "(a negative one would reverse the gradients, NaN would poison the weights)."
        )
    return float(value)


def check_clip_algorithm(value: Any, clip_val: float | None = None) -> str:
    """``gradient_clip_algorithm``: ``"norm"`` (default when None) or ``"value"``; said when nothing is clipped.

    ``clip_val``: the checked ``gradient_clip_val`` (None: no clipping), so that an algorithm given
    without a threshold is warned about rather than silently unused.
    """
    if value is None:
        return "norm"
    if isinstance(value, str) and value.lower() in ("norm", "value"):
        if clip_val is None:
            from torchplug.utilities.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"gradient_clip_algorithm={value!r} has no effect: gradient_clip_val is not set, so the Trainer "
                "clips nothing (a configure_gradient_clipping override still receives both). Hint: pass "
                "gradient_clip_val=..., or drop gradient_clip_algorithm."
            )
        return value.lower()
    raise MisconfigurationError(f"gradient_clip_algorithm={value!r}: choose 'norm' or 'value'.")


def check_root_dir(value: Any) -> str:
    """``default_root_dir``: None (the current directory), or a path or URL (str or ``os.PathLike``)."""
    if value is None:
        return os.getcwd()
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if isinstance(path, str) and path:
        if "://" not in path and os.path.isfile(path):
            raise MisconfigurationError(
                f"default_root_dir={path!r} is a file; logs and checkpoints go in directories under it. Hint: give "
                "a directory (it is created when missing), or remove the file."
            )
        return path
    raise MisconfigurationError(
        f"default_root_dir={value!r} is not valid: give a directory path or URL (a str or a pathlib.Path), or None "
        "for the current directory."
    )


#: The values of ``nonfinite_loss``, with what each does.
NONFINITE_LOSS_CHOICES = ("raise", "skip", "ignore")


def check_nonfinite_loss(value: Any) -> str:
    """``nonfinite_loss``: ``"raise"`` (default), ``"skip"`` or ``"ignore"`` (see the Trainer's docstring)."""
    if value is None:
        return "raise"
    if isinstance(value, str) and value.lower() in NONFINITE_LOSS_CHOICES:
        return value.lower()
    raise MisconfigurationError(
        f"nonfinite_loss={value!r}: choose 'raise' (stop with an error naming the step), 'skip' (skip the "
        "optimizer step of such a batch, with a warning) or 'ignore'."
    )


#: The settings ``barebones=True`` turns off, each with the value that would turn it on.
_BAREBONES_OFF = (
    ("enable_checkpointing", "checkpointing"),
    ("logger", "logging"),
    ("enable_progress_bar", "the progress bar"),
    ("enable_model_summary", "the model summary"),
    ("num_sanity_val_steps", "the sanity check"),
    ("fast_dev_run", "a development run"),
    ("detect_anomaly", "anomaly detection"),
    ("profiler", "profiling"),
)


def check_barebones(given: dict[str, Any]) -> None:
    """``barebones=True`` turns off everything that costs speed; asking for one of those too is an error naming it."""
    for name, feature in _BAREBONES_OFF:
        value = given.get(name)
        if value is None or value is False or (name in ("num_sanity_val_steps", "fast_dev_run") and value == 0):
            continue
        raise MisconfigurationError(
            f"Trainer(barebones=True, {name}={value!r}): {feature} can cost speed, so barebones mode turns it off. "
            f"Hint: remove {name}=, or barebones=True."
        )


def warn_if_minimum_above_maximum(unit: str, minimum: int | None, maximum: int | None) -> None:
    """``min_epochs``/``min_steps`` above the maximum given: the maximum ends training first, so say so."""
    if minimum is not None and maximum is not None and maximum != -1 and minimum > maximum:
        from torchplug.utilities.rank_zero import rank_zero_warn

        rank_zero_warn(
            f"min_{unit}={minimum} is more than max_{unit}={maximum}: training stops at max_{unit}, so min_{unit} "
            f"has no effect. Hint: give min_{unit} <= max_{unit}."
        )
