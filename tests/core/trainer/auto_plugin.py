"""A plugin module for the ``accelerator="auto"`` tests: an accelerator that is installed but cannot run here.

Installed as the distribution ``torchplug-test-acme`` by the tests (``tests.plugin_site_support``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torchplug import hookimpl
from torchplug.accelerators.cpu import CPUAccelerator


class AbsentCard(CPUAccelerator):
    """An accelerator whose hardware is missing: its reason is what "auto" must repeat."""

    auto_priority: ClassVar[int] = 70

    @staticmethod
    def is_available() -> bool:
        return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "no Acme card found (/dev/acme0 is missing). Hint: pip install acme-driver"


@hookimpl
def torchplug_register_accelerators(registry: Any) -> None:
    registry.register("acme", AbsentCard, description="Acme cards (absent on test machines)")
