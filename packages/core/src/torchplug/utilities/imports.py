"""Importing lazily, and asking whether a module or a distribution is installed without importing it.

Plugin probes run while ``core plugins list`` lists them, and ``import torchplug`` (or a plugin
package) must stay free of torch: these helpers only look, or import on first use. This module
imports neither torch nor a vendor library.

Lightning's availability flags that user code imports from here (``_OMEGACONF_AVAILABLE``,
``_TORCHVISION_AVAILABLE``) are looked up on first access, so ``import torchplug`` pays nothing
for them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["distribution_version", "lazy_attributes", "module_available"]

#: Lightning's availability flags: the flag's name to the module it looks for.
_FLAGS: Final = {"_OMEGACONF_AVAILABLE": "omegaconf", "_TORCHVISION_AVAILABLE": "torchvision"}


def __getattr__(name: str) -> bool:
    """A flag of :data:`_FLAGS`: whether its module is installed, looked up once, on first access."""
    module = _FLAGS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    available = module_available(module)
    globals()[name] = available
    return available


def module_available(name: str) -> bool:
    """Whether ``import name`` could find the module (``"torch_xla"``, ``"poptorch"``), without importing it.

    A module already imported counts as available; a broken installation (a package whose
    parent cannot be imported, or a module without a spec) and a module blocked by
    ``sys.modules[name] = None`` count as missing.
    """
    if sys.modules.get(name) is not None:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def distribution_version(name: str) -> str | None:
    """The installed version of the distribution ``name`` (its pip name), or None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def lazy_attributes(
    package: str, targets: Mapping[str, str], globals_: dict[str, Any], distribution: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``__getattr__`` and ``__dir__`` that import ``targets[name]`` on first access.

    A plugin package uses it to export its classes without importing torch when it is imported::

        __getattr__, __dir__ = lazy_attributes(__name__, {"XPUAccelerator": "acme_xpu.accelerator"},
                                               globals(), distribution="acme-xpu")

    Args:
        package: The module's ``__name__`` (used in the error message).
        targets: Public name to the module that defines it (``"torchplug.trainer.trainer"``).
        globals_: The module's ``globals()``; a loaded attribute is cached there.
        distribution: The pip name whose installed version ``__version__`` gives (``"0+unknown"``
            when it is not installed, as in a source tree); None: no ``__version__``.
    """

    def __getattr__(name: str) -> Any:
        if name == "__version__" and distribution is not None:
            return distribution_version(distribution) or "0+unknown"
        module_name = targets.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        globals_[name] = value
        return value

    def __dir__() -> list[str]:
        extra = {"__version__"} if distribution is not None else set()
        return sorted({*globals_, *targets, *extra})

    return __getattr__, __dir__
