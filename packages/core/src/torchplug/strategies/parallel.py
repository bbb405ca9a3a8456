"""The ParallelStrategy base class: several processes joined in a ``torch.distributed`` process group."""

from __future__ import annotations

import difflib
import math
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy
from torchplug.utilities.distributed import collective_timeout, init_process_group

__all__ = ["ParallelStrategy"]

T = TypeVar("T")

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class ParallelStrategy(Strategy):
    """One process per device, on one or more nodes, with the collectives of ``torch.distributed``.

    Args:
        accelerator, precision, checkpoint_io, cluster_environment: As for :class:`Strategy`.
        parallel_devices: The devices of this node's processes (by default from ``devices=``).
        process_group_backend: ``"gloo"``, ``"nccl"``... (or torch's per-device form,
            ``"cpu:gloo,cuda:nccl"``); by default the accelerator's. A backend torch knows but this
            build lacks (``"nccl"`` on a CPU build), or a misspelt one (``"ncl"``), is refused here,
            not when the processes meet; a backend a vendor library registers later (``"hccl"``) is
            taken as given.
        timeout: How long a collective may wait for the other processes before failing: a
            ``timedelta``, or a number of seconds (default: ``TORCHPLUG_COLLECTIVE_TIMEOUT`` seconds,
            600 unless set; torch's own default is 30 minutes).

    Raises:
        MisconfigurationError: ``process_group_backend`` or ``timeout`` is not valid; the message
            says why, with a hint.
    """

    is_distributed: ClassVar[bool] = True
    #: Each process trains on other data (data parallelism): ``fit`` compares the first training batch
    #: of every process once and warns when they are all the same (unsharded data). A strategy whose
    #: processes are meant to share batches (tensor or pipeline parallelism) sets it False.
    distinct_batches: ClassVar[bool] = True

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = None,
    ) -> None:
        super().__init__(accelerator, precision, checkpoint_io, cluster_environment)
        self.parallel_devices = parallel_devices
        self.process_group_backend = _check_backend(process_group_backend)
        self.timeout = _check_timeout(timeout)

    @property
    def num_processes(self) -> int:
        """Processes per node."""
        return len(self.parallel_devices) if self.parallel_devices else 1

    @property
    @override
    def root_device(self) -> torch.device:
        """This process's device: the local rank's entry of the parallel devices."""
        assert self.parallel_devices, "the Trainer sets parallel_devices before use"
        return self.parallel_devices[self.local_rank]

    @property
    @override
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0."""
        return self.global_rank == 0

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Each process reads the shard of its global rank."""
        return {"num_replicas": self.num_nodes * self.num_processes, "rank": self.global_rank}

    @override
    def set_world_ranks(self) -> None:
        """Tell the cluster environment this process's global rank and the world size.

        The global rank is ``node_rank * processes per node + local_rank``; the world size is
        ``num_nodes * processes per node``.
        """
        assert self.cluster_environment is not None
        env = self.cluster_environment
        env.set_global_rank(env.node_rank() * self.num_processes + env.local_rank())
        env.set_world_size(self.num_nodes * self.num_processes)

    @override
    def setup_environment(self) -> None:
        """Select this process's device, then compute the ranks and join the process group.

        The device comes first because backends such as NCCL bind the group's communicators to
        the device that is current when the group is joined; joined earlier, every process would
        use device 0. The ranks are computed again here: a spawned worker learns its local rank
        only now.
        """
        assert self.cluster_environment is not None and self.accelerator is not None
        super().setup_environment()
        self.set_world_ranks()
        backend = self.process_group_backend or self.accelerator.process_group_backend
        _require_known_backend(backend)
        timeout = self.timeout if self.timeout is not None else collective_timeout()
        init_process_group(self.cluster_environment, backend, timeout, self.num_processes)

    @override
    def model_to_device(self) -> None:
        """Move the module to this process's device."""
        assert self.module is not None
        self.module.to(self.root_device)

    # -- collectives --------------------------------------------------------------------------

    @staticmethod
    def _active() -> bool:
        return dist.is_available() and dist.is_initialized()

    @override
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""
        if self._active():
            dist.barrier()

    @override
    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send any picklable ``obj`` from rank ``src`` to every process."""
        if not self._active():
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=src)
        return holder[0]

    @override
    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process, stacked on a new first dimension (``sync_grads``: with gradients)."""
        if not self._active():
            return tensor.unsqueeze(0)
        if sync_grads:
            from torch.distributed.nn.functional import all_gather

            return torch.stack(all_gather(tensor.contiguous(), group=group or dist.group.WORLD))
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return torch.stack(parts)

    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Reduce over every process: ``"mean"`` (default), ``"sum"``, ``"max"`` or ``"min"``."""
        if not self._active():
            return tensor
        op = (reduce_op or "mean").lower()
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce_op={reduce_op!r}: choose one of {', '.join(_REDUCE_OPS)}.")
        value = torch.as_tensor(tensor, device=self.root_device).clone()
        if op == "mean" and not value.is_floating_point():
            value = value.double()
        dist.all_reduce(value, op=_REDUCE_OPS[op], group=group)
        if op == "mean":
            value = value / dist.get_world_size(group)
        return value

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """True if every process (``all=True``) or any process decided True."""
        if not self._active():
            return decision
        count = self.reduce(torch.tensor(int(decision), device=self.root_device), reduce_op="sum")
        return bool(count == self.world_size) if all else bool(count > 0)


def _check_backend(backend: object) -> str | None:
    """``process_group_backend`` as given, refused at once when this torch build lacks a backend it names.

    Each name of ``"gloo"`` or ``"cpu:gloo,cuda:nccl"`` that torch knows must be built in
    (``torch.distributed.is_backend_available``). A name torch does not know yet is kept: a vendor
    library may register it only when the processes start (``"hccl"``, ``"ccl"``); it is checked
    in each process before the group is joined (:func:`_require_known_backend`).
    """
    if backend is None:
        return None
    if not isinstance(backend, str) or not backend.strip():
        raise MisconfigurationError(
            f"process_group_backend={backend!r} is not valid: give the name of a torch.distributed backend. "
            "Hint: process_group_backend='gloo' (CPU) or 'nccl' (NVIDIA GPUs), or leave it None for the "
            "accelerator's own."
        )
    for name in _backend_names(backend):
        if name in dist.Backend.backend_list and not dist.is_backend_available(name):
            raise MisconfigurationError(
                f"process_group_backend={backend!r} is not valid: this torch build ({torch.__version__}) has no "
                f"{name!r} backend (torch.distributed.is_backend_available({name!r}) is False). Hint: leave "
                "process_group_backend=None for the accelerator's own, or install a torch build with it."
            )
    return backend


def _backend_names(backend: str) -> list[str]:
    """The backend names in ``"gloo"`` or torch's per-device form ``"cpu:gloo,cuda:nccl"``, lower case."""
    return [part.rpartition(":")[2].strip().lower() for part in backend.split(",")]


def _require_known_backend(backend: str) -> None:
    """Refuse, before any process waits for another, a backend that torch still does not know.

    By now the accelerator and the strategy have imported what registers a vendor's backend, so an
    unknown name is a mistake; torch itself would fail only once every process has met, with
    ``AssertionError: Unknown backend type``.
    """
    known = [name for name in dist.Backend.backend_list if name != "undefined"]
    for name in _backend_names(backend):
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            raise MisconfigurationError(
                f"process_group_backend={backend!r} is not valid: torch.distributed has no backend {name!r} "
                f"(known here: {', '.join(known)}). Hint: "
                + (f"did you mean {close[0]!r}? " if close else "")
                + "Leave process_group_backend=None for the accelerator's own, or import the library that "
                "registers the backend (torch.distributed.Backend.register_backend) before the Trainer runs."
            )


def _check_timeout(timeout: object) -> timedelta | None:
    """``timeout`` as a ``timedelta``: one given, or a number of seconds; None stays None (the default)."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise MisconfigurationError(
            f"timeout={timeout!r} is not valid: give how long a collective may wait, as a positive number of "
            "seconds or a datetime.timedelta. Hint: timeout=timedelta(minutes=30) or timeout=1800."
        )
    return timeout if isinstance(timeout, timedelta) else timedelta(seconds=seconds)
