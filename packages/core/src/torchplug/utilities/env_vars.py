"""Reading ``TORCHPLUG_*`` environment variables: one strict parser shared by every package.

Each function reads one variable where it is used and checks its value there. A value it cannot
understand raises :class:`~torchplug.SettingsError` naming the variable, quoting the value and
listing what is accepted; it never falls back to a default in silence. An unset or empty (blank)
variable gives the default. Plugin packages use the same functions for their own variables::

    from torchplug.utilities.env_vars import env_bool, env_float

    auto_requeue = env_bool("TORCHPLUG_SLURM_AUTO_REQUEUE", default=True)
    timeout = env_float("TORCHPLUG_RANK_FAILURE_TIMEOUT", default=30.0, minimum=0.0)

Imports neither torch nor any plugin.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Final, overload

from torchplug._errors import SettingsError

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "env_bool", "env_choice", "env_float", "env_int", "env_list"]

#: Spellings read as True (case-insensitive).
TRUE_WORDS: Final = ("1", "true", "yes", "on")
#: Spellings read as False (case-insensitive).
FALSE_WORDS: Final = ("0", "false", "no", "off")


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    """The variable's value as set; None when it is unset or blank."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or not value.strip():
        return None
    return value


@overload
def env_bool(
    name: str, default: bool, *, environ: Mapping[str, str] | None = None, error: type[SettingsError] = ...
) -> bool: ...
@overload
def env_bool(
    name: str, default: None, *, environ: Mapping[str, str] | None = None, error: type[SettingsError] = ...
) -> bool | None: ...
def env_bool(
    name: str,
    default: bool | None = False,
    *,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> bool | None:
    """Read a yes/no variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case).

    Args:
        name: The variable, for example ``"TORCHPLUG_PROGRESS_BAR"``.
        default: What an unset or blank variable means; None for a three-way setting (on, off, unset).
        environ: Where to read it (default ``os.environ``).
        error: The :class:`~torchplug.SettingsError` subclass to raise.

    Raises:
        SettingsError: Any other value.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    unset = " Leave it unset for the default." if default is None else ""
    raise error(
        f"{name}={value!r} is not a boolean. Hint: use {name}=1 to turn it on or {name}=0 to turn it off "
        f"(also accepted: {'/'.join(TRUE_WORDS[1:])} and {'/'.join(FALSE_WORDS[1:])}).{unset}"
    )


@overload
def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> int: ...
@overload
def env_int(
    name: str,
    default: None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> int | None: ...
def env_int(
    name: str,
    default: int | None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> int | None:
    """Read a whole number, checked against ``minimum`` and ``maximum`` (both inclusive).

    Raises:
        SettingsError: The value is not an integer, or is out of range.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise error(f"{name}={value!r} is not valid. Allowed: {_range('an integer', minimum, maximum)}.")
    return number


@overload
def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> float: ...
@overload
def env_float(
    name: str,
    default: None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> float | None: ...
def env_float(
    name: str,
    default: float | None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> float | None:
    """Read a finite number (``30``, ``2.5``), checked against ``minimum`` and ``maximum`` (both inclusive).

    Raises:
        SettingsError: The value is not a number, not finite (``nan``, ``inf``), or out of range.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = float(value.strip())
    except ValueError:
        number = math.nan
    if (
        not math.isfinite(number)
        or (minimum is not None and number < minimum)
        or (maximum is not None and number > maximum)
    ):
        raise error(f"{name}={value!r} is not valid. Allowed: {_range('a number', minimum, maximum)}.")
    return number


def _range(what: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{what} from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f"{what} >= {minimum:g}"
    if maximum is not None:
        return f"{what} <= {maximum:g}"
    return what


@overload
def env_choice(
    name: str,
    choices: Sequence[str],
    default: str,
    *,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> str: ...
@overload
def env_choice(
    name: str,
    choices: Sequence[str],
    default: None,
    *,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = ...,
) -> str | None: ...
def env_choice(
    name: str,
    choices: Sequence[str],
    default: str | None,
    *,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> str | None:
    """Read one of ``choices`` (compared without case); returns the choice as spelt in ``choices``.

    Raises:
        SettingsError: Any other value.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    by_word = {choice.lower(): choice for choice in choices}
    found = by_word.get(value.strip().lower())
    if found is None:
        raise error(f"{name}={value!r} is not valid. Allowed: {', '.join(choices)}.")
    return found


#: What a registry name (or entry-point or distribution name) may look like.
NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+@-]*$")


def env_list(
    name: str,
    *,
    pattern: re.Pattern[str] | None = NAME_PATTERN,
    what: str = "a name (letters, digits and '_', '-', '.', '+', '@')",
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> tuple[str, ...]:
    """Read a comma-separated list (``"a, b"`` gives ``("a", "b")``); empty items are skipped.

    Args:
        name: The variable.
        pattern: Every item must match it (by default a registry, entry-point or distribution
            name); None accepts any text.
        what: How an item is described in the error message.
        environ: Where to read it (default ``os.environ``).
        error: The :class:`~torchplug.SettingsError` subclass to raise.

    Raises:
        SettingsError: An item does not match ``pattern`` (``"slurm;mpi"``: the separator is a comma).
    """
    value = _raw(name, environ)
    if value is None:
        return ()
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    for item in items:
        if pattern is not None and not pattern.match(item):
            raise error(
                f"{name}={value!r} has the item {item!r}, which is not {what}. "
                f"Hint: separate items with commas, as in {name}=a,b."
            )
    return items
