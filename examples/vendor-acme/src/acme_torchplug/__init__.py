"""acme-torchplug: the torchplug accelerator ``acme`` for the Acme NPU (``Trainer(accelerator="acme")``).

Importing this package imports neither torch nor acme_runtime; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from acme_torchplug._vendor import AcmeRuntimeUnavailableError
    from acme_torchplug.accelerator import AcmeAccelerator

__all__ = ["AcmeAccelerator", "AcmeRuntimeUnavailableError", "__version__"]

_LAZY: Final = {
    "AcmeAccelerator": "acme_torchplug.accelerator",
    "AcmeRuntimeUnavailableError": "acme_torchplug._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="acme-torchplug")
