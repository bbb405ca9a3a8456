"""DistributedDataParallel: a full copy of the model per process, gradients averaged in backward."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from datetime import timedelta
from typing import Any, ClassVar

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.nn.parallel.distributed import _find_tensors
from torch.optim import Optimizer
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.parallel import ParallelStrategy

__all__ = ["DDPStrategy", "StepDispatcher"]

_START_METHODS = ("popen", "spawn", "fork", "forkserver")


class StepDispatcher(torch.nn.Module):
    """Routes ``forward(step_name, ...)`` to ``module.<step_name>(...)``.

    Wrappers such as DDP only synchronise gradients for computations that go through their
    ``forward``; this lets ``training_step`` be that forward without the user writing one.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    @override
    def forward(self, step_name: str, *args: Any, **kwargs: Any) -> Any:
        """Return ``module.<step_name>(*args, **kwargs)`` (for example ``step_name="training_step"``)."""
        return getattr(self.module, step_name)(*args, **kwargs)


class DDPStrategy(ParallelStrategy):
    """Data parallel training with ``torch.nn.parallel.DistributedDataParallel``.

    Args:
        start_method: How local processes start: ``"popen"`` re-runs your script once per extra
            rank (as ``torchrun`` does; the default, works with any script), ``"spawn"`` starts fresh
            workers (model and data must pickle), ``"fork"`` forks workers (works in notebooks).
        find_unused_parameters: Let DDP handle parameters that get no gradient in some steps (slower).
        accelerator, precision, checkpoint_io, cluster_environment, parallel_devices,
            process_group_backend, timeout: As for :class:`ParallelStrategy`.
        **ddp_kwargs: Passed to ``DistributedDataParallel`` (``static_graph``, ``bucket_cap_mb``...).
    """

    restore_checkpoint_after_setup: ClassVar[bool] = False

    def __init__(
        self,
        start_method: str = "popen",
        find_unused_parameters: bool = False,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        if start_method not in _START_METHODS:
            raise MisconfigurationError(f"start_method={start_method!r}: choose one of {', '.join(_START_METHODS)}.")
        super().__init__(
            accelerator, precision, checkpoint_io, cluster_environment, parallel_devices, process_group_backend, timeout
        )
        self.start_method = start_method
        self.find_unused_parameters = find_unused_parameters
        self.ddp_kwargs = ddp_kwargs
        self._manual_sync = False  # inside a manual-optimization training_step whose gradients DDP syncs
        self._sync_blocked = False  # inside no_backward_sync()

    @override
    def configure_launcher(self) -> None:
        """Set the launcher for ``start_method``: a script re-launcher for ``popen``, else a multiprocessing one."""
        super().configure_launcher()
        assert self.cluster_environment is not None
        if self.start_method == "popen":
            from torchplug.strategies.launchers.subprocess_script import SubprocessScriptLauncher

            self.launcher = SubprocessScriptLauncher(self.cluster_environment, self.num_processes, self.num_nodes)
        else:
            from torchplug.strategies.launchers.multiprocessing import MultiProcessingLauncher

            self.launcher = MultiProcessingLauncher(self, self.start_method)

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Wrap the module in DistributedDataParallel (through a :class:`StepDispatcher`)."""
        device = self.root_device
        device_ids = [device.index] if device.index is not None else None
        return DistributedDataParallel(
            StepDispatcher(module),
            device_ids=device_ids,
            find_unused_parameters=self.find_unused_parameters,
            **self.ddp_kwargs,
        )

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``training_step`` through DDP's forward, so its gradients are synchronised."""
        assert self.precision is not None and self.model is not None
        with self.precision.forward_context():
            model = self.model
            if isinstance(model, DistributedDataParallel) and not getattr(self.module, "automatic_optimization", True):
                return self._manual_training_step(model, *args, **kwargs)
            return model("training_step", *args, **kwargs)

    def _manual_training_step(self, model: DistributedDataParallel, *args: Any, **kwargs: Any) -> Any:
        """``training_step`` of manual optimization, whose ``manual_backward`` runs inside DDP's forward.

        DDP arms its gradient all-reduce after its forward returns, for a backward that follows it;
        here the backward comes first, from inside. So DDP's own arming is turned off for this
        forward, and :meth:`backward` arms the all-reduce right before each ``manual_backward``.
        """
        sync = model.require_backward_grad_sync
        model.require_backward_grad_sync = False
        self._manual_sync = sync
        try:
            return model("training_step", *args, **kwargs)
        finally:
            model.require_backward_grad_sync = sync
            model.require_forward_param_sync = sync  # buffers are broadcast before the next forward, as usual
            self._manual_sync = False

    @override
    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Backward through the precision plugin; in manual optimization, with DDP's all-reduce armed first."""
        model = self.model
        armed = self._manual_sync and not self._sync_blocked and torch.is_grad_enabled()
        if armed and isinstance(model, DistributedDataParallel):
            unused = model.find_unused_parameters and not model.static_graph
            model.reducer.prepare_for_backward(list(_find_tensors(loss)) if unused else [])
        super().backward(loss, optimizer, *args, **kwargs)

    @contextlib.contextmanager
    @override
    def no_backward_sync(self, enabled: bool = True) -> Generator[None, None, None]:
        """Skip the gradient all-reduce inside the block (for gradient accumulation, also in manual optimization)."""
        if enabled and isinstance(self.model, DistributedDataParallel):
            blocked, self._sync_blocked = self._sync_blocked, True
            try:
                with self.model.no_sync():
                    yield
            finally:
                self._sync_blocked = blocked
        else:
            yield

    @override
    def __repr__(self) -> str:
        return f"DDPStrategy(start_method={self.start_method!r}, find_unused_parameters={self.find_unused_parameters})"
