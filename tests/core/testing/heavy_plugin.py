"""A plugin module that imports torch and a vendor library at listing time (what listing_is_light catches)."""

from __future__ import annotations

import acme_vendorlib  # noqa: F401  (the fake vendor library in fake_vendor/)
import torch  # noqa: F401

from torchplug import Registry, hookimpl


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register("heavy", "torchplug.accelerators.cpu:CPUAccelerator", description="imports torch when listed")
