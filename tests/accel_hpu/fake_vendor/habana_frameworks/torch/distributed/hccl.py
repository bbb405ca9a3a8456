"""habana_frameworks.torch.distributed.hccl: importing it registers the ``hccl`` process-group backend.

The fake backend runs gloo underneath and, like HCCL, refuses to all-reduce int64 or float64 tensors.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

_REFUSED = (torch.int64, torch.float64)


class ProcessGroupHCCL(dist.ProcessGroup):  # type: ignore[misc]
    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        for tensor in tensors:
            if tensor.dtype in _REFUSED:
                raise RuntimeError(f"hccl: all_reduce does not support {tensor.dtype} tensors")
        return self._gloo.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._gloo.broadcast(tensors, opts)

    def allgather(self, outputs: Any, inputs: Any, opts: Any) -> Any:
        return self._gloo.allgather(outputs, inputs, opts)

    def barrier(self, opts: Any) -> Any:
        return self._gloo.barrier(opts)

    def getBackendName(self) -> str:
        return "hccl"

    def shutdown(self) -> None:
        # destroy_process_group() calls this. Dropping the gloo group joins its worker threads now,
        # while Python is alive: a worker still releasing a finished collective's tensors at
        # interpreter exit would need the GIL and abort the process ("terminate called without an
        # active exception"). DDP keeps this wrapper alive, so its own destruction comes too late.
        self._gloo = None


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> ProcessGroupHCCL:
    return ProcessGroupHCCL(store, rank, size, timeout)


if not hasattr(dist.Backend, "HCCL"):
    dist.Backend.register_backend("hccl", _create, devices=["cpu"])
