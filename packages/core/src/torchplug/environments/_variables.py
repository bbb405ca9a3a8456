"""Reading a cluster environment's variables, with errors that name the environment and the variable."""

from __future__ import annotations

import os

__all__ = ["read_int", "read_text"]


def read_text(environment: str, name: str, hint: str = "") -> str:
    """The value of the environment variable ``name``, which ``environment`` needs (an empty value counts as unset).

    Raises:
        RuntimeError: ``name`` is not set, or empty; the message names both and ends with ``hint``.
    """
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"The {environment} cluster environment needs {name}, but it is not set.{_suffix(hint)}")
    return value


def read_int(environment: str, name: str, hint: str = "") -> int:
    """The integer value of the environment variable ``name``, which ``environment`` needs.

    Raises:
        RuntimeError: ``name`` is not set, or not an integer; the message names both and ends with ``hint``.
    """
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"The {environment} cluster environment needs {name}, but it is not set.{_suffix(hint)}")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(
            f"The {environment} cluster environment read {name}={value!r}, which is not an integer.{_suffix(hint)}"
        ) from None


def _suffix(hint: str) -> str:
    return f" {hint}" if hint else ""
