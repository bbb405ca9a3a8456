"""The single-device strategy: one process, one device."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from typing_extensions import override

from torchplug.accelerators.accelerator import Accelerator
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy

__all__ = ["SingleDeviceStrategy"]

T = TypeVar("T")


class SingleDeviceStrategy(Strategy):
    """Train in this process on one device.

    Args:
        device: The device to use; by default the first device the accelerator gives for ``devices``.
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        super().__init__(accelerator=accelerator, precision=precision, checkpoint_io=checkpoint_io)
        self._device = torch.device(device) if device is not None else None

    @property
    @override
    def root_device(self) -> torch.device:
        """The device given, else the first of the accelerator's parallel devices, else the CPU."""
        if self._device is not None:
            return self._device
        if self.parallel_devices:
            return self.parallel_devices[0]
        return torch.device("cpu")

    @property
    @override
    def own_devices(self) -> list[torch.device] | None:
        """``[device]`` when one was given to the constructor, else None (the Trainer's ``devices=`` decide)."""
        return [self._device] if self._device is not None else None

    @property
    @override
    def is_global_zero(self) -> bool:
        """Always True: this is the only process."""
        return True

    @property
    @override
    def global_rank(self) -> int:
        """Always 0."""
        return 0

    @property
    @override
    def local_rank(self) -> int:
        """Always 0."""
        return 0

    @property
    @override
    def node_rank(self) -> int:
        """Always 0."""
        return 0

    @property
    @override
    def world_size(self) -> int:
        """Always 1."""
        return 1

    @override
    def model_to_device(self) -> None:
        """Move the module to the device."""
        assert self.module is not None
        self.module.to(self.root_device)

    @override
    def barrier(self, name: str | None = None) -> None:
        """Nothing to wait for."""

    @override
    def broadcast(self, obj: T, src: int = 0) -> T:
        """Return ``obj``: there is no one else."""
        return obj

    @override
    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        """Return ``tensor`` with a leading dimension of size 1, the same shape DDP gives with one process."""
        return tensor.unsqueeze(0)

    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Return ``tensor``: the reduction over one process."""
        return tensor
