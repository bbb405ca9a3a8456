"""torch_xla.distributed.parallel_loader: a loader that moves batches to the device (and cuts the graph)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from torch_xla import _fake
from torch_xla.core import xla_model


def _to(data: Any, device: torch.device) -> Any:
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        return {key: _to(value, device) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_to(value, device) for value in data)
    return data


class MpDeviceLoader:
    def __init__(self, loader: Any, device: torch.device, **kwargs: Any) -> None:
        _fake.record("MpDeviceLoader")
        self._loader = loader
        self._device = device

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self._loader):
            if index:
                xla_model.mark_step()
            yield _to(batch, self._device)

    def __len__(self) -> int:
        return len(self._loader)
