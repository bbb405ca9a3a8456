"""torch_xla.core.xla_model: devices, collectives (over gloo between fake processes), memory, random state."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from torch_xla import _fake

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

_OPS = {
    REDUCE_SUM: dist.ReduceOp.SUM,
    REDUCE_MUL: dist.ReduceOp.PRODUCT,
    REDUCE_MIN: dist.ReduceOp.MIN,
    REDUCE_MAX: dist.ReduceOp.MAX,
}


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    _fake.start()
    return _fake.DEVICE


def xrt_world_size(defval: int = 1) -> int:
    _fake.start()
    return _fake.world_size()


def get_ordinal(defval: int = 0) -> int:
    _fake.start()
    return _fake.ordinal()


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    _fake.syncs += 1


def wait_device_ops(devices: Any = None) -> None:
    _fake.waits += 1


def all_reduce(reduce_type: str, inputs: Any, scale: float = 1.0, groups: Any = None, pin_layout: bool = True) -> Any:
    _fake.record(f"all_reduce:{reduce_type}")
    if xrt_world_size() == 1:
        return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs
    tensors = [inputs.clone()] if isinstance(inputs, torch.Tensor) else list(inputs)
    for tensor in tensors:
        dist.all_reduce(tensor, op=_OPS[reduce_type])
        if scale != 1.0:
            tensor.mul_(scale)
    return tensors[0] if isinstance(inputs, torch.Tensor) else inputs


def all_gather(
    value: torch.Tensor, dim: int = 0, groups: Any = None, output: Any = None, pin_layout: bool = True
) -> torch.Tensor:
    _fake.record("all_gather")
    if xrt_world_size() == 1:
        return value.clone()
    parts = [torch.empty_like(value) for _ in range(xrt_world_size())]
    dist.all_gather(parts, value.contiguous())
    return torch.cat(parts, dim=dim)


def collective_broadcast(
    tensors: list[torch.Tensor], root_ordinal: int = 0, groups: Any = None, pin_layout: bool = True
) -> None:
    """As torch_xla does it: every replica but the root zeroes its tensors, then all of them are summed."""
    _fake.record("collective_broadcast")
    with torch.no_grad():
        for tensor in tensors:
            tensor.mul_(1 if get_ordinal() == root_ordinal else 0)
    all_reduce(REDUCE_SUM, tensors, groups=groups, pin_layout=pin_layout)


def rendezvous(tag: str, payload: bytes = b"", replicas: Any = ()) -> list[bytes]:
    _fake.record(f"rendezvous:{tag}")
    if xrt_world_size() > 1:
        dist.barrier()
    return [payload] * xrt_world_size()


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Any = None, pin_layout: bool = True) -> None:
    _fake.record("reduce_gradients")
    count = xrt_world_size()
    if count > 1:
        gradients = [p.grad.data for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        all_reduce(REDUCE_SUM, gradients, scale=1.0 / count, groups=groups, pin_layout=pin_layout)


def broadcast_master_param(model: torch.nn.Module) -> None:
    _fake.record("broadcast_master_param")
    collective_broadcast([t.data for t in [*model.parameters(), *model.buffers()]])
    mark_step()


def get_memory_info(device: torch.device | None = None) -> dict[str, int]:
    _fake.start()
    return {"bytes_used": 3 * 2**20, "bytes_limit": 16 * 2**30, "peak_bytes_used": 5 * 2**20}


def get_rng_state(device: Any = None) -> int:
    _fake.start()
    return _fake.rng_seed


def set_rng_state(seed: int, device: Any = None) -> None:
    _fake.start()
    _fake.rng_seed = int(seed)


def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """Every tensor counts as an XLA tensor here: each is returned as a new CPU copy (so the tests can tell)."""
    _fake.record("_maybe_convert_to_cpu")
    return _to_cpu(data, convert)


def _to_cpu(data: Any, convert: bool) -> Any:
    if isinstance(data, torch.Tensor):
        return data.detach().clone() if type(data) is torch.Tensor and convert else data
    if isinstance(data, dict):
        return {key: _to_cpu(value, convert) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_to_cpu(value, convert) for value in data)
    return data
