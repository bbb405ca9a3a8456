"""io-xla's plugin module: registers the ``xla`` checkpoint IO by dotted path; imports neither torch nor torch_xla."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug import hookimpl

if TYPE_CHECKING:
    from torchplug import Registry


@hookimpl
def torchplug_register_checkpoint_io(registry: Registry) -> None:
    registry.register(
        "xla",
        "torchplug_xla_io.checkpoint_io:XLACheckpointIO",
        description="XLA tensors moved to the CPU, then written atomically through fsspec",
    )
