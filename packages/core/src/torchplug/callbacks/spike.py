"""``SpikeDetection``: stop training when the loss jumps far above its running mean, and note the batches to skip."""

from __future__ import annotations

import collections
import json
import math
import os
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.utilities.annotations import RealSignature

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["SpikeDetection", "TrainingSpikeException"]


class TrainingSpikeException(RuntimeError):
    """Raised by :class:`SpikeDetection` when the loss spiked in batch ``batch_idx``."""

    __signature__ = RealSignature()  # inspect.signature shows real types (utilities/annotations.py)

    def __init__(self, batch_idx: int, *args: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args)
        self.batch_idx = batch_idx


class SpikeDetection(Callback):
    """Raise :class:`TrainingSpikeException` when a training loss spikes, after writing the batches to skip.

    After each training batch (from batch ``warmup`` on), the loss is compared with the mean of
    the last ``window`` losses: a loss that is not an improvement (for ``mode="min"``: not lower
    than the previous one) and exceeds the mean by more than ``atol`` and by more than ``rtol``
    times the mean is a spike; so is a NaN or infinite loss with ``finite_only=True``. The batch
    and the one before it are appended to ``exclude_batches_path`` (a JSON list, written by
    global rank 0), so that a resumed run can leave them out, and training stops with the
    exception. Every process decides on its own loss, and training stops everywhere when any
    of them saw a spike.

    Reading the loss costs a host synchronisation per step, paid only by runs that use this callback.

    Example:
        >>> Trainer(callbacks=[SpikeDetection(window=20, rtol=2.0)])

    Args:
        mode: ``"min"`` (the loss should fall) or ``"max"``.
        window: How many past losses the running mean covers.
        warmup: Batches (of each epoch) before detection starts.
        atol: The absolute margin above the mean that counts (None: any).
        rtol: The margin relative to the mean that counts (None: any).
        exclude_batches_path: A JSON file, or a folder for ``skip_batches.json`` (default: the
            Trainer's ``default_root_dir``).
        finite_only: True: a NaN or infinite loss is a spike. False: it is ignored unless every
            process saw a finite loss, and it never enters the mean.
    """

    def __init__(
        self,
        mode: str = "min",
        window: int = 10,
        warmup: int = 1,
        atol: float | None = None,
        rtol: float | None = 2.0,
        exclude_batches_path: str | os.PathLike[str] | None = None,
        finite_only: bool = True,
    ) -> None:
        if mode not in ("min", "max"):
            raise MisconfigurationError(f"SpikeDetection(mode={mode!r}): choose 'min' or 'max'.")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise MisconfigurationError(f"SpikeDetection(window={window!r}): give an int >= 1.")
        self.mode = mode
        self.window = window
        self.warmup = warmup
        self.atol = atol
        self.rtol = rtol
        self.exclude_batches_path = os.fspath(exclude_batches_path) if exclude_batches_path is not None else None
        self.finite_only = finite_only
        self.bad_batches: list[int] = []
        self.last_val: float = 0.0
        self._values: collections.deque[float] = collections.deque(maxlen=window)

    @property
    def running_mean(self) -> float:
        """The mean of the last ``window`` losses (NaN before the first)."""
        return sum(self._values) / len(self._values) if self._values else math.nan

    def _path(self, trainer: Trainer) -> str:
        path = self.exclude_batches_path or trainer.default_root_dir
        return path if path.endswith(".json") else os.path.join(path, "skip_batches.json")

    @override
    @torch.no_grad()
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Check the batch's loss for a spike."""
        if isinstance(outputs, torch.Tensor):
            loss_tensor = outputs
        elif isinstance(outputs, dict) and isinstance(outputs.get("loss"), torch.Tensor):
            loss_tensor = outputs["loss"]
        elif outputs is None or outputs == {}:
            return  # training_step returned None: the batch was skipped, it has no loss
        else:
            raise MisconfigurationError(
                "SpikeDetection reads the loss of each training batch, but training_step returned "
                f"{type(outputs).__name__}. Hint: return the loss tensor, or a dict with 'loss'."
            )
        loss = float(loss_tensor.detach())
        spike = batch_idx >= self.warmup and self._is_spike(loss)
        if trainer.world_size > 1:  # stop every process when any one spiked
            spike = trainer.strategy.reduce_boolean_decision(spike, all=False)
        if spike:
            self._handle_spike(trainer, batch_idx)
        finite = math.isfinite(loss)
        if not self.finite_only and trainer.world_size > 1:
            finite = trainer.strategy.reduce_boolean_decision(finite, all=True)
        if finite:
            self._values.append(loss)
            self.last_val = loss

    def _is_spike(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return self.finite_only
        if not self._values:
            return False
        difference = loss - self.last_val
        if (difference <= 0) if self.mode == "min" else (difference >= 0):
            return False  # an improvement is never a spike
        mean = self.running_mean
        beyond_atol = self.atol is None or abs(loss - mean) >= abs(self.atol)
        beyond_rtol = self.rtol is None or abs(loss - mean) >= abs(self.rtol * mean)
        return beyond_atol and beyond_rtol

    def _handle_spike(self, trainer: Trainer, batch_idx: int) -> None:
        # The batch before may have corrupted the weights that made this one spike: skip both.
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        if trainer.is_global_zero:
            path = self._path(trainer)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as stream:
                json.dump(self.bad_batches, stream, indent=4)
        raise TrainingSpikeException(batch_idx=batch_idx)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The running window, the last loss and the batches found so far."""
        return {
            "last_val": self.last_val,
            "values": list(self._values),
            "bad_batches": list(self.bad_batches),
            "mode": self.mode,
            "warmup": self.warmup,
            "atol": self.atol,
            "rtol": self.rtol,
            "bad_batches_path": self.exclude_batches_path,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue with the checkpoint's window and batches."""
        self.last_val = float(state_dict["last_val"])
        self._values = collections.deque(state_dict.get("values", []), maxlen=self.window)
        self.bad_batches = list(state_dict.get("bad_batches", []))

    def __repr__(self) -> str:
        return f"SpikeDetection(mode={self.mode!r}, window={self.window}, rtol={self.rtol}, atol={self.atol})"
