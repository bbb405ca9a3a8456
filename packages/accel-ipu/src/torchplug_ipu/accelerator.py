"""The ``ipu`` accelerator: Graphcore IPUs through poptorch."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from typing_extensions import override

from torchplug import Accelerator
from torchplug_ipu import _vendor
from torchplug_ipu.precision import IPU_PRECISIONS, ipu_precision_name

__all__ = ["IPUAccelerator"]


class IPUAccelerator(Accelerator):
    """Train on Graphcore IPUs through poptorch (imported the first time the accelerator is used).

    ``devices=N`` is PopTorch's replication factor: one process drives N copies of the model, one
    per IPU, and PopTorch averages their gradients on the IPUs themselves; no ``torch.distributed``
    process group is ever created. Poplar attaches IPUs in powers of two, so N is 1, 2, 4, 8...
    The ``ipu`` strategy is used for every count.

    The user's precision names map to this package's IPU precisions (``"16-true"`` to
    ``"ipu-16-true"``...); IPUs have no bfloat16 and no float64, so those names are refused.
    """

    name: ClassVar[str] = "ipu"
    auto_priority: ClassVar[int] = 90
    device_type: ClassVar[str] = "ipu"
    #: IPUs have no ``torch.autocast``; ``16-mixed`` maps to ``ipu-16-mixed``, which uses PopTorch's own.
    autocast_device_type: ClassVar[str | None] = None
    #: Informational: replicas talk through PopTorch's replication (``poptorch.Options.replicationFactor``);
    #: the ``ipu`` strategy never creates a ``torch.distributed`` process group.
    process_group_backend: ClassVar[str] = "poptorch"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(IPU_PRECISIONS.values())
    single_device_strategy: ClassVar[str] = "ipu"
    parallel_strategy: ClassVar[str] = "ipu"

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether poptorch is installed and finds at least one IPU."""
        return IPUAccelerator.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why IPU training cannot run here: poptorch missing or broken, or no IPU."""
        missing = _vendor.probe()
        if missing is not None:
            return missing
        try:
            available = _vendor.hardware_available(1)
        except _vendor.PoptorchUnavailableError as exc:
            return str(exc)
        if not available:
            return (
                "poptorch finds no IPU on this machine (poptorch.ipuHardwareIsAvailable() is False). "
                "Hint: run on an IPU system (gc-info -l lists its IPUs), or use accelerator='cpu'."
            )
        return None

    @staticmethod
    @override
    def auto_device_count() -> int:
        """All the IPUs PopTorch can attach to this process (a power of two)."""
        return _vendor.ipu_count()

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int:
        """Accept a replication factor: a power of two (``1``, ``2``, ``4``...), ``"4"``, or ``-1`` for all IPUs."""
        if isinstance(devices, bool) or not isinstance(devices, (int, str)):
            raise TypeError(f"devices={devices!r} is not valid with accelerator='ipu': {_CHOICES}")
        text = str(devices).strip()
        if not text.lstrip("-").isdigit():
            raise ValueError(f"devices={devices!r} is not valid with accelerator='ipu': {_CHOICES}")
        count = int(text)
        if count == -1:
            count = IPUAccelerator.auto_device_count()
            if count < 1:
                raise ValueError(f"devices={devices!r} asks for every IPU, but poptorch finds none on this machine.")
            return count
        if count < 1 or count & (count - 1):
            raise ValueError(f"devices={devices!r} is not valid with accelerator='ipu': {_CHOICES}")
        available = IPUAccelerator.auto_device_count()
        if count > available:
            raise ValueError(
                f"devices={devices!r} asks for {count} IPUs, but PopTorch can attach {available} here. "
                f"Hint: use devices={available} (or -1), or fewer."
            )
        return count

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``ipu:0`` ... ``ipu:n-1``: one entry per replica (all driven by this one process)."""
        return [torch.device("ipu", index) for index in range(int(devices))]

    @override
    def setup_device(self, device: torch.device) -> None:
        """Nothing to select: PopTorch attaches the IPUs when it compiles the model."""

    @override
    def teardown(self) -> None:
        """Nothing to release: the strategy detaches the IPUs."""

    @override
    def synchronize(self, device: torch.device) -> None:
        """Nothing to wait for: a PopTorch model call returns once the IPUs have run it."""

    # -- decisions the core delegates ---------------------------------------------------------

    @override
    def default_strategy(self, num_devices: int, num_nodes: int, interactive: bool) -> str:
        """``ipu`` for any count: one process drives every replica, so notebooks work too."""
        return "ipu"

    @override
    def precision_for(self, precision: str) -> str:
        """The IPU precision for the user's name: ``"16-true"`` -> ``"ipu-16-true"``; others are refused."""
        return ipu_precision_name(precision)


_CHOICES = (
    "give the number of replicas, one per IPU: a power of two such as devices=1, 2, 4 or 8 "
    "(or -1 for every IPU). PopTorch picks the IPUs; ids cannot be chosen."
)
