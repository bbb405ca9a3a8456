"""The ``hpu_parallel`` strategy: DistributedDataParallel over HCCL, one process per HPU.

HCCL, the Gaudi collective library, reduces floating-point tensors only (float32, bfloat16,
float16): an all-reduce of an int64 tensor fails. The core's collectives reduce such tensors
(a step count, a boolean decision as an int, ``torch.distributed.broadcast_object_list``'s
sizes), so this strategy casts them to float32 around the collective and back afterwards, here
rather than in the core. Integers stay exact up to 2**24.
"""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any, Final, TypeVar

import torch
import torch.distributed as dist

from torchplug import Accelerator, CheckpointIO, ClusterEnvironment, Precision
from torchplug.strategies.ddp import DDPStrategy
from torchplug_hpu import _habana
from torchplug_hpu.single import HPUStrategyMixin, check_hpu_accelerator

__all__ = ["HPUParallelStrategy"]

T = TypeVar("T")

_REDUCE_OPS: Final = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}

#: The dtypes HCCL reduces; anything else goes through float32.
_HCCL_DTYPES: Final = (torch.float32, torch.bfloat16, torch.float16)


class HPUParallelStrategy(HPUStrategyMixin, DDPStrategy):
    """Data parallel training on several HPUs with ``DistributedDataParallel`` over HCCL.

    Before joining the process group, each process imports
    ``habana_frameworks.torch.distributed.hccl``, which registers the ``hccl`` backend with
    ``torch.distributed``. Like :class:`~torchplug_hpu.HPUSingleStrategy`, it marks a step
    (``mark_step``) after each backward pass and optimizer step, and writes checkpoints from CPU
    copies of the tensors.

    Args:
        start_method, find_unused_parameters, accelerator, precision, checkpoint_io,
            cluster_environment, parallel_devices, timeout, **ddp_kwargs: As for
            :class:`torchplug.strategies.ddp.DDPStrategy`.
        process_group_backend: ``"hccl"`` (the default).
    """

    def __init__(
        self,
        start_method: str = "popen",
        find_unused_parameters: bool = False,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = "hccl",
        timeout: timedelta = timedelta(minutes=30),
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__(
            start_method,
            find_unused_parameters,
            accelerator,
            precision,
            checkpoint_io,
            cluster_environment,
            parallel_devices,
            process_group_backend,
            timeout,
            **ddp_kwargs,
        )

    # -- set-up ---------------------------------------------------------------------------------

    def _configure_launcher(self) -> None:
        check_hpu_accelerator(self.accelerator, "hpu_parallel")
        super()._configure_launcher()

    def setup_environment(self) -> None:
        """Register the ``hccl`` backend (importing habana_frameworks' module for it), then join the group."""
        assert self.accelerator is not None, "the Trainer sets the accelerator before setup_environment()"
        if (self.process_group_backend or self.accelerator.process_group_backend) == "hccl":
            _habana.import_hccl()
        super().setup_environment()

    # -- collectives: HCCL reduces floating-point tensors only -----------------------------------

    @staticmethod
    def _hccl() -> bool:
        return dist.is_available() and dist.is_initialized() and dist.get_backend() == "hccl"

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Reduce over every process (``"mean"``, ``"sum"``, ``"max"``, ``"min"``); other dtypes go through float32.

        ``"mean"`` returns floating point; the others return the input's dtype.
        """
        if not self._hccl():
            return super().reduce(tensor, group, reduce_op)
        op = (reduce_op or "mean").lower()
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce_op={reduce_op!r}: choose one of {', '.join(_REDUCE_OPS)}.")
        value = torch.as_tensor(tensor, device=self.root_device)
        dtype = value.dtype
        work = value.clone() if dtype in _HCCL_DTYPES else value.to(torch.float32)
        dist.all_reduce(work, op=_REDUCE_OPS[op], group=group)
        if op == "mean":
            return work / dist.get_world_size(group)
        if dtype in _HCCL_DTYPES:
            return work
        return (work.round() if not dtype.is_floating_point else work).to(dtype)

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send any picklable ``obj`` from rank ``src``: its size as int32, then its bytes (no int64 tensor)."""
        if not self._hccl():
            return super().broadcast(obj, src)
        payload = pickle.dumps(obj) if self.global_rank == src else b""
        size = torch.tensor([len(payload)], dtype=torch.int32, device=self.root_device)
        dist.broadcast(size, src=src)
        data = torch.zeros(int(size.item()), dtype=torch.uint8)
        if payload:
            data[:] = torch.tensor(list(payload), dtype=torch.uint8)
        data = data.to(self.root_device)
        dist.broadcast(data, src=src)
        return pickle.loads(bytes(data.cpu().tolist()))  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return (
            f"HPUParallelStrategy(start_method={self.start_method!r}, "
            f"find_unused_parameters={self.find_unused_parameters})"
        )
