"""Plugins that each break one part of their kind's contract: what the conformance checks must catch.

Each class is the core's working plugin with one deliberate fault, named after it. The cluster
environment is in broken_environment.py: its module must stay torch-free, as detection imports it.
"""

from __future__ import annotations

from typing import Any

import torch
from fsspec.core import url_to_fs

from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.single_device import SingleDeviceStrategy


class JunkAcceptingAccelerator(CPUAccelerator):
    """``parse_devices`` takes anything that is not a positive number as one device."""

    @staticmethod
    def parse_devices(devices: Any) -> int:
        try:
            return CPUAccelerator.parse_devices(devices)
        except (TypeError, ValueError):
            return 1


class UnquotedErrorsAccelerator(CPUAccelerator):
    """Refuses what it should, with messages that do not say which value was wrong."""

    @staticmethod
    def parse_devices(devices: Any) -> int:
        try:
            return CPUAccelerator.parse_devices(devices)
        except (TypeError, ValueError):
            raise ValueError("invalid devices") from None


class RaisingAvailabilityAccelerator(CPUAccelerator):
    """``is_available()`` lets the vendor library's error through."""

    @staticmethod
    def is_available() -> bool:
        raise RuntimeError("driver handle could not be opened")


class PickledRngAccelerator(CPUAccelerator):
    """``get_rng_state()`` returns an object that ``torch.load(weights_only=True)`` refuses."""

    def get_rng_state(self) -> Any:
        return {"generator": _Generator(7)}


class _Generator:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Generator) and other.seed == self.seed

    __hash__ = None  # type: ignore[assignment]


class FlatGatherStrategy(SingleDeviceStrategy):
    """``all_gather`` returns the tensor without the new world-size dimension."""

    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        return tensor


class ObjectStatePrecision(Precision):
    """``state_dict()`` holds an object that ``torch.load(weights_only=True)`` refuses."""

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": _Generator(3)}


class InPlaceCheckpointIO(TorchCheckpointIO):
    """Writes straight into the final file (a failed save destroys the previous one) and ignores options."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        fs, target = url_to_fs(path)
        fs.makedirs(target.rpartition("/")[0], exist_ok=True)
        with fs.open(target, "wb") as file:
            torch.save(checkpoint, file)
