"""Horovod: data parallelism with Horovod's ring all-reduce, in processes started by ``horovodrun``.

The model is replicated; ``hvd.DistributedOptimizer`` averages the gradients during backward.
Horovod starts the processes (``horovodrun -np N python train.py``), never torchplug, and its own
collectives replace ``torch.distributed``: no process group is created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.parallel import ParallelStrategy
from torchplug_horovod import _vendor

__all__ = ["HorovodStrategy"]

T = TypeVar("T")


class HorovodStrategy(ParallelStrategy):
    """Data parallel training through Horovod (``horovod.torch``), under ``horovodrun``.

    Gradients are averaged by ``hvd.DistributedOptimizer`` as backward produces them; with
    ``accumulate_grad_batches=N`` Horovod reduces once per N backward passes. Gradient clipping
    sees the averaged gradients. The optimizer of ``configure_optimizers`` keeps working as
    returned (the Trainer steps it through the strategy).

    Args:
        accelerator, precision, checkpoint_io, cluster_environment, parallel_devices: As for
            :class:`~torchplug.strategies.parallel.ParallelStrategy`.
        compression: ``hvd.Compression.none`` (default) or ``hvd.Compression.fp16`` for the all-reduce.
    """

    handles_gradient_accumulation: ClassVar[bool] = False

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        compression: Any = None,
    ) -> None:
        super().__init__(accelerator, precision, checkpoint_io, cluster_environment, parallel_devices)
        self.compression = compression
        self._distributed: dict[int, Any] = {}  # id(user's optimizer) -> its hvd.DistributedOptimizer
        self._stepping: Any = None  # the DistributedOptimizer whose step is running

    @staticmethod
    def is_available() -> bool:
        """Whether horovod is installed."""
        return _vendor.probe() is None

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why Horovod cannot run here (horovod missing), or None."""
        return _vendor.probe()

    # -- set-up -------------------------------------------------------------------------------

    @override
    def configure_launcher(self) -> None:
        """No launcher: horovodrun starts the processes. Refuse to run outside it with more than one."""
        environment = self.cluster_environment
        if environment is None or not environment.creates_processes_externally:
            raise MisconfigurationError(
                f"strategy='horovod' runs in processes started by horovodrun, but the cluster environment is "
                f"{type(environment).__name__}. Hint: horovodrun -np 2 python train.py (and devices='auto'). "
                f"{_vendor.ALTERNATIVES}."
            )

    @override
    def set_world_ranks(self) -> None:
        """Nothing to compute: horovodrun decided the ranks."""

    @override
    def setup_environment(self) -> None:
        """Select this process's device and start Horovod (``hvd.init()``); no torch process group."""
        assert self.accelerator is not None and self.cluster_environment is not None
        self.accelerator.setup_device(self.root_device)
        hvd = _vendor.hvd()
        hvd.init()
        if hvd.size() != self.world_size or hvd.rank() != self.global_rank:
            raise MisconfigurationError(
                f"Horovod sees rank {hvd.rank()} of {hvd.size()}, but the cluster environment "
                f"{type(self.cluster_environment).__name__} says rank {self.global_rank} of {self.world_size}."
            )

    @override
    def setup(self, configure_optimizers: Callable[[], list[Optimizer]] | None = None) -> None:
        """Move the module, give every process rank 0's weights and optimizer state, wrap the optimizers."""
        super().setup(configure_optimizers)
        assert self.module is not None
        hvd = _vendor.hvd()
        hvd.broadcast_parameters(self.module.state_dict(), root_rank=0)
        accumulate = int(getattr(_trainer_of(self.module), "accumulate_grad_batches", 1))
        self._distributed.clear()
        names = {p: n for n, p in self.module.named_parameters()}
        for optimizer in self.optimizers:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            named = [(names[p], p) for group in optimizer.param_groups for p in group["params"] if p in names]
            self._distributed[id(optimizer)] = hvd.DistributedOptimizer(
                optimizer,
                named_parameters=named,
                compression=self.compression or hvd.Compression.none,
                backward_passes_per_step=accumulate,
                op=hvd.Average,
            )

    # -- steps --------------------------------------------------------------------------------

    @override
    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Backward (Horovod's hooks start the all-reduce); inside a step, wait for the averaged gradients."""
        super().backward(loss, optimizer, *args, **kwargs)
        if self._stepping is not None:
            self._stepping.synchronize()  # before clipping and the step: they must see the average
            self._synchronized = True

    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Run ``closure`` (forward, backward, averaged gradients), then step without a second synchronisation."""
        distributed = self._distributed.get(id(optimizer))
        if distributed is None:
            return super().optimizer_step(optimizer, closure)
        self._stepping, self._synchronized = distributed, False

        def synchronized_closure() -> Any:
            result = closure() if closure is not None else None
            if not self._synchronized and (closure is None or result is not None):
                distributed.synchronize()  # gradients accumulated before a closure-less step
            return result

        try:
            with distributed.skip_synchronize():
                return super().optimizer_step(optimizer, synchronized_closure)
        finally:
            self._stepping = None

    # -- collectives --------------------------------------------------------------------------

    @override
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point (a Horovod all-reduce)."""
        hvd = _vendor.hvd()
        hvd.allreduce(torch.zeros(1), name=f"barrier.{name}" if name else None, op=hvd.Sum)

    @override
    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send any picklable ``obj`` from rank ``src`` to every process."""
        result: T = _vendor.hvd().broadcast_object(obj, root_rank=src)
        return result

    @override
    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process, stacked on a new first dimension."""
        if group is not None:
            raise MisconfigurationError("HorovodStrategy.all_gather(group=...): Horovod gathers over all processes.")
        gathered: torch.Tensor = _vendor.hvd().allgather(tensor.unsqueeze(0).contiguous())
        return gathered

    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Reduce over every process: ``"mean"`` (default), ``"sum"``, ``"max"`` or ``"min"``."""
        hvd = _vendor.hvd()
        ops = {"mean": hvd.Average, "sum": hvd.Sum, "max": hvd.Max, "min": hvd.Min}
        op = (reduce_op or "mean").lower()
        if op not in ops:
            raise ValueError(f"reduce_op={reduce_op!r}: choose one of {', '.join(ops)}.")
        value = torch.as_tensor(tensor, device=self.root_device)
        if op == "mean" and not value.is_floating_point():
            value = value.double()
        return hvd.allreduce(value, op=ops[op])

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """True if every process (``all=True``) or any process decided True."""
        count = self.reduce(torch.tensor(int(decision)), reduce_op="sum")
        return bool(count == self.world_size) if all else bool(count > 0)

    @override
    def teardown(self) -> None:
        """Drop the DistributedOptimizers, then tear down the rest."""
        self._distributed.clear()
        super().teardown()

    def __repr__(self) -> str:
        return "HorovodStrategy()"


def _trainer_of(module: Any) -> Any:
    try:
        return module.trainer
    except (AttributeError, RuntimeError):
        return None
