"""The ``hpu_single`` strategy: one HPU in this process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from torchplug import Accelerator, CheckpointIO, MisconfigurationError, Precision
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.utilities.apply import move_to_device
from torchplug_hpu import _habana
from torchplug_hpu.precision import hpu_precision_name

__all__ = ["HPUSingleStrategy", "HPUStrategyMixin", "check_hpu_accelerator"]


class HPUStrategyMixin:
    """What every HPU strategy adds to the core strategy it extends (put it first among the bases).

    HPU precision names, a ``mark_step`` after every backward pass and optimizer step (it runs the
    recorded graph in lazy mode and does nothing in eager mode), and checkpoints written from CPU
    copies of the tensors, so they load on any machine.
    """

    is_global_zero: bool

    def precision_for(self, precision: str) -> str:
        """The HPU precision for the user's name (unsupported names are refused with the choices)."""
        return hpu_precision_name(precision)

    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None) -> None:
        """Backward through the strategy and the precision, then run the recorded graph (``mark_step``)."""
        super().backward(loss, optimizer)  # type: ignore[misc]
        _habana.mark_step()

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision, then run the recorded graph (``mark_step``)."""
        result = super().optimizer_step(optimizer, closure)  # type: ignore[misc]
        _habana.mark_step()
        return result

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Write CPU copies of the checkpoint's tensors through the checkpoint IO, from global rank 0 only."""
        if self.is_global_zero:  # the other ranks would copy for nothing
            super().save_checkpoint(  # type: ignore[misc]
                move_to_device(checkpoint, torch.device("cpu")), filepath, storage_options
            )


class HPUSingleStrategy(HPUStrategyMixin, SingleDeviceStrategy):
    """Train in this process on one HPU.

    In lazy mode (``PT_HPU_LAZY_MODE=1``) the HPU runs the recorded graph at each
    ``mark_step``: this strategy marks one after every backward pass and every optimizer step, as
    Intel's guides do (in eager mode ``mark_step`` does nothing). Checkpoints are written from
    CPU copies of the tensors, so they load on any machine.

    Args:
        device: The HPU (``"hpu"``); by default the one the accelerator gives.
        accelerator, precision, checkpoint_io: As for :class:`torchplug.Strategy`.
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        super().__init__(device, accelerator=accelerator, precision=precision, checkpoint_io=checkpoint_io)

    @property
    def root_device(self) -> torch.device:
        """The HPU given, else the accelerator's, else ``hpu``."""
        return self._device or (self.parallel_devices[0] if self.parallel_devices else torch.device("hpu"))

    def _configure_launcher(self) -> None:
        """No launcher; checks that the accelerator is the HPU."""
        check_hpu_accelerator(self.accelerator, "hpu_single")

    def __repr__(self) -> str:
        return f"HPUSingleStrategy(device={self._device!s})" if self._device is not None else "HPUSingleStrategy()"


def check_hpu_accelerator(accelerator: Accelerator | None, strategy: str) -> None:
    """Refuse an HPU strategy on other hardware, in the user's words.

    Raises:
        MisconfigurationError: The accelerator is not an HPU.
    """
    if accelerator is None or accelerator.device_type != "hpu":
        raise MisconfigurationError(
            f"strategy={strategy!r} runs on HPUs, but the accelerator is {type(accelerator).__name__}. "
            "Hint: use accelerator='hpu'."
        )
