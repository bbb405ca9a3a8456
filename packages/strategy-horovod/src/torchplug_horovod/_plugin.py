"""strategy-horovod's plugin module: the ``horovod`` strategy and cluster environment; imports nothing heavy.

Both carry the same cheap probe, so ``core plugins list`` shows them unavailable, with the reason
and the alternatives, where horovod is not installed (``pip install horovod`` fails against
torch 2.1 and later; see the README).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry

_PROBE: Final = "torchplug_horovod._vendor:probe"


@hookimpl
def torchplug_register_strategies(registry: Registry) -> None:
    registry.register(
        "horovod",
        "torchplug_horovod.strategy:HorovodStrategy",
        probe=_PROBE,
        description="Data parallel through Horovod's all-reduce, in processes started by horovodrun",
    )


@hookimpl
def torchplug_register_cluster_environments(registry: Registry) -> None:
    registry.register(
        "horovod",
        "torchplug_horovod.environment:HorovodEnvironment",
        probe=_PROBE,
        description="Processes started by horovodrun (HOROVOD_RANK, HOROVOD_SIZE...)",
    )


@hookimpl
def torchplug_environment_report() -> dict[str, Any]:
    from torchplug_horovod._vendor import report

    return report()
