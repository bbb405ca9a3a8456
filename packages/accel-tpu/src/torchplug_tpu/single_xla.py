"""The ``single_xla`` strategy: one XLA device, in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from torchplug import Accelerator, CheckpointIO, Precision
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug_tpu import _xla
from torchplug_tpu.precision import XLA_PRECISIONS

__all__ = ["SingleXLAStrategy"]


class SingleXLAStrategy(SingleDeviceStrategy):
    """Train on one XLA device (a TPU core or chip) in this process.

    Batches arrive on the device through torch_xla's ``MpDeviceLoader``, and the lazy graph is
    run on the device after every optimizer step (``torch_xla.sync``).

    Args:
        device: The device index (``2``, ``"xla:2"``, ``torch.device("xla", 2)``); by default the
            one ``devices=`` selects (``devices=[2]``), else this process's default XLA device.
        accelerator, precision, checkpoint_io: As for :class:`torchplug.Strategy`.
    """

    def __init__(
        self,
        device: int | str | torch.device | None = None,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        placeholder = torch.device("xla", device) if isinstance(device, int) else device
        super().__init__(placeholder, accelerator=accelerator, precision=precision, checkpoint_io=checkpoint_io)
        self._root: torch.device | None = None

    @property
    def root_device(self) -> torch.device:
        """The XLA device, as torch_xla names it (asked once; this starts the XLA runtime)."""
        if self._root is None:
            chosen = self._device or (self.parallel_devices[0] if self.parallel_devices else None)
            self._root = _xla.device(chosen.index if chosen is not None else None)
        return self._root

    def precision_for(self, precision: str) -> str:
        """The XLA precision for a core precision name (other names are kept)."""
        return XLA_PRECISIONS.get(precision, precision)

    def process_dataloader(self, dataloader: Iterable[Any]) -> Iterable[Any]:
        """Wrap the loader in torch_xla's ``MpDeviceLoader`` (batches arrive on the device)."""
        return _xla.device_loader(dataloader, self.root_device)

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision plugin, then run the step's graph on the device (``torch_xla.sync``)."""
        result = super().optimizer_step(optimizer, closure)
        _xla.sync()
        return result

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Run the pending graph, then write the checkpoint through the checkpoint IO."""
        _xla.sync()
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def __repr__(self) -> str:
        return f"SingleXLAStrategy(device={self._device!s})" if self._device is not None else "SingleXLAStrategy()"
