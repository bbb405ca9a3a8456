"""Lazy attributes for packages whose public names would otherwise import torch at import time."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, targets: Mapping[str, str], globals_: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a module's ``__getattr__`` and ``__dir__`` that import ``targets[name]`` on first access.

    Args:
        package: The module's ``__name__`` (used in the error message).
        targets: Public name to the module that defines it (``"torchplug.trainer.trainer"``).
        globals_: The module's ``globals()``; a loaded attribute is cached there.
    """

    def __getattr__(name: str) -> Any:
        module_name = targets.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        globals_[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals_, *targets})

    return __getattr__, __dir__
