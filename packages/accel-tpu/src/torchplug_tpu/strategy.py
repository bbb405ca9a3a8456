"""The XLA strategies.

* ``xla`` (:class:`XLAStrategy`): one process per XLA device, gradients all-reduced by torch_xla's collectives.
* ``single_xla`` (:class:`SingleXLAStrategy`): one XLA device, in this process.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable, Generator, Iterable
from typing import Any, ClassVar, Final, TypeVar

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import Accelerator, CheckpointIO, ClusterEnvironment, MisconfigurationError, Precision
from torchplug.strategies.parallel import ParallelStrategy
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug_tpu import _vendor
from torchplug_tpu._launcher import XLALauncher
from torchplug_tpu.environment import XLAEnvironment
from torchplug_tpu.precision import XLA_PRECISIONS

__all__ = ["SingleXLAStrategy", "XLAStrategy"]

T = TypeVar("T")

_REDUCE_OPS: Final = {"sum": "REDUCE_SUM", "mean": "REDUCE_SUM", "max": "REDUCE_MAX", "min": "REDUCE_MIN"}


class XLAStrategy(ParallelStrategy):
    """Data parallel training on all the XLA devices of a host (a TPU VM), one process per device.

    The processes are started by torch_xla's ``xmp.spawn`` (see :class:`XLALauncher`); their
    ranks come from the torch_xla runtime (:class:`XLAEnvironment`), which also does the
    rendezvous, so there is no ``MASTER_ADDR`` to set. On a TPU pod, run the same script on every
    host; ``num_nodes`` is not needed.

    The gradients are averaged over the processes right after each backward pass that ends an
    accumulation (``xm.reduce_gradients``, skipped inside ``no_backward_sync``), as DDP does, so
    gradient clipping and the ``on_before_optimizer_step`` hooks see the averaged gradients; the
    lazy graph is run on the device (``torch_xla.sync``) after every optimizer step. Any precision
    plugin works; the user's names map to the XLA precisions.

    Args:
        accelerator, precision, checkpoint_io: As for :class:`torchplug.Strategy`.
        cluster_environment: Where the ranks come from; by default :class:`XLAEnvironment`.
        parallel_devices: The devices of this host (by default from ``devices=``).
        start_method: ``"fork"`` (default), ``"spawn"`` or ``"forkserver"`` (see :class:`XLALauncher`).
        sync_module_states: Copy rank 0's parameters and buffers to every process before training.
    """

    restore_checkpoint_after_setup: ClassVar[bool] = False

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        start_method: str = "fork",
        sync_module_states: bool = True,
    ) -> None:
        super().__init__(
            accelerator, precision, checkpoint_io, cluster_environment or XLAEnvironment(), parallel_devices
        )
        self.start_method = start_method
        self.sync_module_states = sync_module_states
        self._launched = False
        self._sync_gradients = True

    # -- where we are ---------------------------------------------------------------------------
    # Before the launch (in the launching process) every answer is rank 0 of one, without asking
    # the runtime: starting it there would make torch_xla refuse to spawn the processes.

    @property
    @override
    def root_device(self) -> torch.device:
        """This process's XLA device (known only inside the launched processes)."""
        if not self._launched:
            raise RuntimeError(
                "strategy='xla' knows its XLA device only inside the processes it launches (trainer.fit() starts "
                "them). Hint: move tensors with self.device inside the Module's hooks, not before fit()."
            )
        return _vendor.device()

    @property
    @override
    def global_rank(self) -> int:
        """This process's rank (0 before the launch)."""
        return super().global_rank if self._launched else 0

    @property
    @override
    def local_rank(self) -> int:
        """This process's rank on its host (0 before the launch)."""
        return super().local_rank if self._launched else 0

    @property
    @override
    def node_rank(self) -> int:
        """This host's rank (0 before the launch)."""
        return super().node_rank if self._launched else 0

    @property
    @override
    def world_size(self) -> int:
        """The number of processes, from the runtime (this host's device count before the launch)."""
        return super().world_size if self._launched else self.num_processes

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Each process reads the shard of its global rank; the runtime knows how many there are."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    # -- set-up ---------------------------------------------------------------------------------

    @override
    def precision_for(self, precision: str) -> str:
        """The XLA precision for a core precision name (other names are kept)."""
        return XLA_PRECISIONS.get(precision, precision)

    @override
    def configure_launcher(self) -> None:
        accelerator = self.accelerator
        if accelerator is None or accelerator.device_type != "xla":
            raise MisconfigurationError(
                f"strategy='xla' runs on XLA devices, but the accelerator is {type(accelerator).__name__}. "
                "Hint: use accelerator='tpu' (or 'auto' on a TPU VM)."
            )
        count = accelerator.auto_device_count()
        if self.num_processes not in (1, count):
            raise MisconfigurationError(
                f"strategy='xla' starts one process on every XLA device of this host ({count}), but "
                f"{self.num_processes} devices were asked for. Hint: use devices={count} (or -1), or devices=1."
            )
        self.launcher = XLALauncher(self, self.start_method)

    @override
    def set_world_ranks(self) -> None:
        """Nothing to set: the XLA runtime numbers the processes."""

    @override
    def setup_environment(self) -> None:
        """Mark this process launched; the runtime has already joined it to the others."""
        self._launched = True
        assert self.accelerator is not None, "the Trainer sets the accelerator before setup_environment()"
        self.accelerator.setup_device(self.root_device)

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Give every process rank 0's parameters and buffers (``xm.broadcast_master_param``)."""
        if self.sync_module_states and self.world_size > 1:
            _vendor.xla_model().broadcast_master_param(module)
        return module

    @override
    def process_dataloader(self, dataloader: Iterable[Any]) -> Iterable[Any]:
        """Wrap the loader in torch_xla's ``MpDeviceLoader`` (batches arrive on the device)."""
        return _vendor.device_loader(dataloader, self.root_device)

    # -- steps ----------------------------------------------------------------------------------

    @override
    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Backward through the precision, then average the gradients over the processes (unless accumulating)."""
        super().backward(loss, optimizer, *args, **kwargs)
        if self._sync_gradients and self.world_size > 1:
            self._reduce_gradients(optimizer)

    def _reduce_gradients(self, optimizer: Optimizer | None) -> None:
        xm = _vendor.xla_model()
        if optimizer is not None:
            xm.reduce_gradients(optimizer)
            return
        assert self.model is not None
        gradients = [p.grad for p in self.model.parameters() if p.grad is not None]  # manual optimization
        if gradients:
            xm.all_reduce(xm.REDUCE_SUM, gradients, scale=1.0 / self.world_size)

    @contextlib.contextmanager
    @override
    def no_backward_sync(self, enabled: bool = True) -> Generator[None, None, None]:
        """Skip the gradient all-reduce inside the block (for gradient accumulation)."""
        previous, self._sync_gradients = self._sync_gradients, not enabled
        try:
            yield
        finally:
            self._sync_gradients = previous

    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision plugin, then run the step's graph on the device (``torch_xla.sync``)."""
        result = super().optimizer_step(optimizer, closure)
        _vendor.sync()
        return result

    # -- collectives ----------------------------------------------------------------------------

    @override
    def barrier(self, name: str | None = None) -> None:
        """Wait for every process (``xm.rendezvous``); nothing to wait for before the launch."""
        if self._launched and self.world_size > 1:
            _vendor.xla_model().rendezvous(name or "torchplug_tpu.barrier")

    @override
    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send ``obj`` (a tensor or any picklable object) from rank ``src`` to every process."""
        if not self._launched or self.world_size == 1:
            return obj
        if isinstance(obj, torch.Tensor):
            tensor = obj.detach().clone().to(self.root_device)
            _vendor.xla_model().collective_broadcast([tensor], root_ordinal=src)
            return tensor  # type: ignore[return-value]
        payload = pickle.dumps(obj) if self.global_rank == src else b""
        # The ranks' payloads differ in size: broadcast the size first, then the padded bytes.
        size = int(self._broadcast_tensor(torch.tensor([len(payload)], dtype=torch.int32), src).item())
        data = torch.zeros(size, dtype=torch.int32)
        if payload:
            data[:] = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(torch.int32)
        received = self._broadcast_tensor(data, src).cpu().to(torch.uint8)
        return pickle.loads(received.numpy().tobytes())  # type: ignore[no-any-return]

    def _broadcast_tensor(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        on_device = tensor.to(self.root_device)
        _vendor.xla_model().collective_broadcast([on_device], root_ordinal=src)
        return on_device

    @override
    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process, stacked on a new first dimension of size world_size."""
        if not self._launched or self.world_size == 1:
            return tensor.unsqueeze(0)
        value = tensor.unsqueeze(0).to(self.root_device)
        if sync_grads:
            functions = _vendor.import_xla("torch_xla.core.functions")
            return functions.all_gather(value, dim=0)  # type: ignore[no-any-return]
        return _vendor.xla_model().all_gather(value, dim=0)  # type: ignore[no-any-return]

    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Reduce over every process: ``"mean"`` (default), ``"sum"``, ``"max"`` or ``"min"``."""
        op = (reduce_op or "mean").lower()
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce_op={reduce_op!r}: choose one of {', '.join(_REDUCE_OPS)}.")
        if not self._launched or self.world_size == 1:
            return tensor
        value = torch.as_tensor(tensor).to(self.root_device)
        if op == "mean" and not value.is_floating_point():
            value = value.float()  # XLA devices have no fast float64
        xm = _vendor.xla_model()
        reduced = xm.all_reduce(getattr(xm, _REDUCE_OPS[op]), value)
        return reduced / self.world_size if op == "mean" else reduced

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """True if every process (``all=True``) or any process decided True."""
        if not self._launched or self.world_size == 1:
            return decision
        count = self.reduce(torch.tensor(int(decision)), reduce_op="sum")
        return bool(count == self.world_size) if all else bool(count > 0)

    # -- checkpoints ----------------------------------------------------------------------------

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Run every process's pending graph (it may hold collectives), then write from rank 0 only."""
        _vendor.sync()
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def __repr__(self) -> str:
        return f"XLAStrategy(start_method={self.start_method!r}, sync_module_states={self.sync_module_states})"


class SingleXLAStrategy(SingleDeviceStrategy):
    """Train on one XLA device (a TPU core or chip) in this process.

    Batches arrive on the device through torch_xla's ``MpDeviceLoader``, and the lazy graph is
    run on the device after every optimizer step (``torch_xla.sync``).

    Args:
        device: The device index (``2``, ``"xla:2"``, ``torch.device("xla", 2)``); by default the
            one ``devices=`` selects (``devices=[2]``), else this process's default XLA device.
        accelerator, precision, checkpoint_io: As for :class:`torchplug.Strategy`.
    """

    def __init__(
        self,
        device: int | str | torch.device | None = None,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        placeholder = torch.device("xla", device) if isinstance(device, int) else device
        super().__init__(placeholder, accelerator=accelerator, precision=precision, checkpoint_io=checkpoint_io)
        self._root: torch.device | None = None

    @property
    @override
    def root_device(self) -> torch.device:
        """The XLA device, as torch_xla names it (asked once; this starts the XLA runtime)."""
        if self._root is None:
            chosen = self._device or (self.parallel_devices[0] if self.parallel_devices else None)
            self._root = _vendor.device(chosen.index if chosen is not None else None)
        return self._root

    @override
    def precision_for(self, precision: str) -> str:
        """The XLA precision for a core precision name (other names are kept)."""
        return XLA_PRECISIONS.get(precision, precision)

    @override
    def process_dataloader(self, dataloader: Iterable[Any]) -> Iterable[Any]:
        """Wrap the loader in torch_xla's ``MpDeviceLoader`` (batches arrive on the device)."""
        return _vendor.device_loader(dataloader, self.root_device)

    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the precision plugin, then run the step's graph on the device (``torch_xla.sync``)."""
        result = super().optimizer_step(optimizer, closure)
        _vendor.sync()
        return result

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Run the pending graph, then write the checkpoint through the checkpoint IO."""
        _vendor.sync()
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def __repr__(self) -> str:
        return f"SingleXLAStrategy(device={self._device!s})" if self._device is not None else "SingleXLAStrategy()"
