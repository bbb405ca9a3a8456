"""The HPU strategies: ``hpu_single`` (one HPU in this process) and ``hpu_parallel`` (DDP over HCCL).

Both share :class:`HPUStrategyMixin`. ``hpu_parallel`` is ``DistributedDataParallel`` over HCCL,
one process per HPU. HCCL, the Gaudi collective library, reduces floating-point tensors only
(float32, bfloat16, float16): an all-reduce of an int64 tensor fails. The core's collectives
reduce such tensors (a step count, a boolean decision as an int,
``torch.distributed.broadcast_object_list``'s sizes), so that strategy casts them to float32
around the collective and back afterwards, here rather than in the core. Integers stay exact up
to 2**24.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final, TypeVar

import torch
import torch.distributed as dist
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import Accelerator, CheckpointIO, ClusterEnvironment, MisconfigurationError, Precision
from torchplug.strategies.ddp import DDPStrategy
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.utilities.apply import move_to_device
from torchplug_hpu import _vendor
from torchplug_hpu.precision import hpu_precision_name

__all__ = ["HPUParallelStrategy", "HPUSingleStrategy", "HPUStrategyMixin", "check_hpu_accelerator"]

T = TypeVar("T")

_REDUCE_OPS: Final = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}

#: The dtypes HCCL reduces; anything else goes through float32.
_HCCL_DTYPES: Final = (torch.float32, torch.bfloat16, torch.float16)


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

    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Backward through the strategy and the precision, then run the recorded graph (``mark_step``)."""
        super().backward(loss, optimizer, *args, **kwargs)  # type: ignore[misc]
        _vendor.mark_step()

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision, then run the recorded graph (``mark_step``)."""
        result = super().optimizer_step(optimizer, closure)  # type: ignore[misc]
        _vendor.mark_step()
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
    @override
    def root_device(self) -> torch.device:
        """The HPU given, else the accelerator's, else ``hpu``."""
        return self._device or (self.parallel_devices[0] if self.parallel_devices else torch.device("hpu"))

    @override
    def configure_launcher(self) -> None:
        """No launcher; checks that the accelerator is the HPU."""
        check_hpu_accelerator(self.accelerator, "hpu_single")

    @override
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
        timeout: timedelta | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__(
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            process_group_backend=process_group_backend,
            timeout=timeout,
            **ddp_kwargs,
        )

    # -- set-up ---------------------------------------------------------------------------------

    @override
    def configure_launcher(self) -> None:
        check_hpu_accelerator(self.accelerator, "hpu_parallel")
        super().configure_launcher()

    @override
    def setup_environment(self) -> None:
        """Register the ``hccl`` backend (importing habana_frameworks' module for it), then join the group."""
        assert self.accelerator is not None, "the Trainer sets the accelerator before setup_environment()"
        if (self.process_group_backend or self.accelerator.process_group_backend) == "hccl":
            _vendor.import_hccl()
        super().setup_environment()

    # -- collectives: HCCL reduces floating-point tensors only -----------------------------------

    @staticmethod
    def _hccl() -> bool:
        return dist.is_available() and dist.is_initialized() and dist.get_backend() == "hccl"

    @override
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

    @override
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

    @override
    def __repr__(self) -> str:
        return (
            f"HPUParallelStrategy(start_method={self.start_method!r}, "
            f"find_unused_parameters={self.find_unused_parameters})"
        )
