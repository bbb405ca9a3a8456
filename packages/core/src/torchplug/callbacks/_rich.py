"""The rich boundary: rich is an optional extra (``pip install 'core[rich]'``), imported only when used."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require_rich"]


def require_rich(user: str) -> ModuleType:
    """Import rich for ``user`` (a class name), or raise an error that names the extra to install.

    Raises:
        ModuleNotFoundError: rich is not installed.
    """
    try:
        return importlib.import_module("rich")
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"{user} draws with the rich package, which is not installed. "
            "Hint: pip install 'core[rich]' (or pip install rich)."
        ) from exc
