"""Reading a cluster environment's integer variables, with errors that name the environment and the variable."""

from __future__ import annotations

import os

__all__ = ["read_int"]


def read_int(environment: str, name: str, hint: str = "") -> int:
    """The integer value of the environment variable ``name``, which ``environment`` needs.

    Raises:
        RuntimeError: ``name`` is not set, or not an integer; the message names both and ends with ``hint``.
    """
    value = os.environ.get(name)
    suffix = f" {hint}" if hint else ""
    if value is None:
        raise RuntimeError(f"The {environment} cluster environment needs {name}, but it is not set.{suffix}")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(
            f"The {environment} cluster environment read {name}={value!r}, which is not an integer.{suffix}"
        ) from None
