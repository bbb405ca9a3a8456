"""The ``xla`` cluster environment: ranks and world size from the torch_xla runtime.

Imports neither torch nor torch_xla at import time: automatic detection imports every registered
environment to ask ``detect()``.
"""

from __future__ import annotations

from typing import ClassVar

from typing_extensions import override

from torchplug import ClusterEnvironment
from torchplug.environments import Evidence
from torchplug_tpu import _vendor

__all__ = ["XLAEnvironment"]


class XLAEnvironment(ClusterEnvironment):
    """The processes of an XLA run, as the torch_xla (PJRT) runtime numbers them.

    Never detected automatically (``detect()`` is always False): the XLA
    strategies create it themselves, and a TPU VM has no variable that would tell a plain script
    from one launched per device. The runtime does its own rendezvous, so there is no main
    address or port, and the setters are ignored: the runtime decides the ranks.

    The ranks are read from the runtime on every call (never cached): a value cached in the
    launching process would be wrong in the processes it starts. Reading them starts the runtime,
    so only the launched processes ask (the XLA strategies report rank 0 of 1 before launching).
    """

    detect_priority: ClassVar[int] = 0

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Never detected: the XLA strategies bring this environment; name it to use it elsewhere."""
        return Evidence.absent("never detected: strategy='xla' and 'single_xla' bring it")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """False: the XLA launcher starts one process per device."""
        return False

    @property
    @override
    def main_address(self) -> str:
        """Not used: the XLA runtime does its own rendezvous."""
        raise NotImplementedError(
            "The xla cluster environment has no main address: the torch_xla runtime does its own rendezvous. "
            "Hint: use it with strategy='xla', not with a torch.distributed strategy such as 'ddp'."
        )

    @property
    @override
    def main_port(self) -> int:
        """Not used: the XLA runtime does its own rendezvous."""
        raise NotImplementedError(
            "The xla cluster environment has no main port: the torch_xla runtime does its own rendezvous. "
            "Hint: use it with strategy='xla', not with a torch.distributed strategy such as 'ddp'."
        )

    @override
    def world_size(self) -> int:
        """The number of processes taking part (``torch_xla.runtime.world_size()``)."""
        return int(_vendor.runtime().world_size())

    @override
    def global_rank(self) -> int:
        """This process's rank among all (``torch_xla.runtime.global_ordinal()``)."""
        return int(_vendor.runtime().global_ordinal())

    @override
    def local_rank(self) -> int:
        """This process's rank on its host (``torch_xla.runtime.local_ordinal()``)."""
        return int(_vendor.runtime().local_ordinal())

    @override
    def node_rank(self) -> int:
        """The rank of this host (``torch_xla.runtime.host_index()``)."""
        return int(_vendor.runtime().host_index())
