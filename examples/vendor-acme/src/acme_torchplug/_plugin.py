"""acme-torchplug's plugin module: registers the ``acme`` accelerator by dotted path.

`core plugins list` imports this module in every process that lists plugins, so it imports nothing
but torchplug: not torch, not acme_runtime. The probe finds acme_runtime without importing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_accelerators(registry: Registry) -> None:
    registry.register(
        "acme",
        "acme_torchplug.accelerator:AcmeAccelerator",
        description="Acme NPUs through acme_runtime; devices=N, -1 or [ids]",
        probe="acme_torchplug._vendor:probe",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from acme_torchplug._vendor import report

    return report()
