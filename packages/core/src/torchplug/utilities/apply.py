"""Applying a function to every tensor in a nested batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

__all__ = ["apply_to_tensors", "move_to_device", "numbers_to_tensors"]


def apply_to_tensors(data: Any, function: Callable[[torch.Tensor], Any]) -> Any:
    """Return ``data`` with ``function`` applied to every tensor inside lists, tuples, dicts and dataclasses."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, (list, tuple)):
        items = [apply_to_tensors(item, function) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        rebuild = cast(Callable[[dict[Any, Any]], Any], type(data))  # dict, OrderedDict...: built from a dict
        return rebuild({key: apply_to_tensors(value, function) for key, value in data.items()})
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        fields = [f.name for f in dataclasses.fields(data) if f.init]
        changes = {name: apply_to_tensors(getattr(data, name), function) for name in fields}
        return dataclasses.replace(data, **changes)
    return data


def numbers_to_tensors(data: Any, device: torch.device) -> Any:
    """Return ``data`` with every Python number turned into a tensor, and every tensor moved, on ``device``."""
    if isinstance(data, (int, float)):  # bool too
        return torch.tensor(data, device=device)
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, (list, tuple)):
        items = [numbers_to_tensors(item, device) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        rebuild = cast(Callable[[dict[Any, Any]], Any], type(data))
        return rebuild({key: numbers_to_tensors(value, device) for key, value in data.items()})
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        fields = [f.name for f in dataclasses.fields(data) if f.init]
        return dataclasses.replace(data, **{name: numbers_to_tensors(getattr(data, name), device) for name in fields})
    return data


def move_to_device(data: Any, device: torch.device) -> Any:
    """Move every tensor in ``data`` to ``device`` (a batch already there is returned as it is)."""
    kind = type(data)
    if kind is tuple or kind is list:  # the common batch, (inputs, targets): checked without a call per item
        for item in data:
            if type(item) is not torch.Tensor or item.device != device:
                break
        else:
            return data
    if _all_on(data, device):
        return data  # the common case on one device: no rebuild of the batch
    return apply_to_tensors(data, lambda t: t.to(device))


def _all_on(data: Any, device: torch.device) -> bool:
    if isinstance(data, torch.Tensor):
        return data.device == device
    if isinstance(data, (list, tuple)):
        for item in data:  # noqa: SIM110  (a plain loop: no generator frame per batch)
            if not _all_on(item, device):
                return False
        return True
    if isinstance(data, Mapping):
        return all(_all_on(value, device) for value in data.values())
    return not (dataclasses.is_dataclass(data) and not isinstance(data, type))
