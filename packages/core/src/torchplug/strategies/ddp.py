"""DistributedDataParallel: a full copy of the model per process, gradients averaged in backward."""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any, ClassVar, Final

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

#: ``DistributedDataParallel`` arguments the strategy sets itself, with what to give instead.
_SET_BY_STRATEGY: Final = {
    "module": "the Trainer wraps your Module",
    "device_ids": "each process's device comes from devices= (Trainer(devices=[0, 2]))",
    "find_unused_parameters": "it is an argument of the strategy itself",
}

#: Lightning's ``DDPStrategy`` arguments that are not honoured here, with what to do instead.
_UNSUPPORTED_LIGHTNING: Final = {
    "model_averaging_period": (
        "post-local SGD model averaging is not built in. Hint: wrap your optimizer in "
        "torch.distributed.optim.PostLocalSGDOptimizer in configure_optimizers, and give "
        "ddp_comm_hook=post_localSGD_hook with ddp_comm_state=PostLocalSGDState(...)."
    ),
}


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
        ddp_comm_hook: A DDP communication hook (``torch.distributed.algorithms.ddp_comm_hooks``,
            for example ``default_hooks.fp16_compress_hook``), registered on the wrapped model
            with ``register_comm_hook``; as Lightning's, but on every accelerator.
        ddp_comm_state: The state given to ``ddp_comm_hook`` (for example a ``PowerSGDState``).
        ddp_comm_wrapper: A function that wraps ``ddp_comm_hook`` (for example
            ``default_hooks.fp16_compress_wrapper``).
        precision_plugin: Lightning's name for ``precision``.
        **ddp_kwargs: Passed to ``DistributedDataParallel`` (``static_graph``, ``bucket_cap_mb``...).

    Raises:
        MisconfigurationError: A value that cannot work, said at once: an unknown ``start_method``,
            a ``find_unused_parameters`` that is not a bool, a ``ddp_kwargs`` name that
            ``DistributedDataParallel`` does not take (with the closest one) or that the strategy
            sets itself, a comm state or wrapper without a hook, Lightning's
            ``model_averaging_period``; and those of :class:`ParallelStrategy`.
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
        timeout: timedelta | float | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_state: object = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        precision_plugin: Precision | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        if start_method not in _START_METHODS:
            raise MisconfigurationError(f"start_method={start_method!r}: choose one of {', '.join(_START_METHODS)}.")
        if not isinstance(find_unused_parameters, bool):
            raise MisconfigurationError(
                f"find_unused_parameters={find_unused_parameters!r} is not valid: give True or False. "
                "Hint: find_unused_parameters=True (or strategy='ddp_find_unused_parameters_true')."
            )
        if precision_plugin is not None:
            if precision is not None:
                raise MisconfigurationError(
                    f"precision={precision!r} and precision_plugin={precision_plugin!r} both set the precision. "
                    "Hint: give only precision= (precision_plugin is Lightning's name for it)."
                )
            precision = precision_plugin
        _check_ddp_kwargs(ddp_kwargs)
        _check_comm_hook(ddp_comm_hook, ddp_comm_state, ddp_comm_wrapper)
        super().__init__(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self.start_method = start_method
        self.find_unused_parameters = find_unused_parameters
        self.ddp_kwargs = ddp_kwargs
        self.ddp_comm_hook = ddp_comm_hook
        self.ddp_comm_state = ddp_comm_state
        self.ddp_comm_wrapper = ddp_comm_wrapper
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
        """Wrap the module in DistributedDataParallel (through a :class:`StepDispatcher`), with the comm hook if any."""
        device = self.root_device
        device_ids = [device.index] if device.index is not None else None
        model = DistributedDataParallel(
            StepDispatcher(module),
            device_ids=device_ids,
            find_unused_parameters=self.find_unused_parameters,
            **self.ddp_kwargs,
        )
        if self.ddp_comm_hook is not None:
            hook = self.ddp_comm_hook
            if self.ddp_comm_wrapper is not None:
                hook = self.ddp_comm_wrapper(hook)
            model.register_comm_hook(state=self.ddp_comm_state, hook=hook)
        return model

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


@functools.cache
def _ddp_parameters() -> tuple[str, ...]:
    """The keyword arguments ``DistributedDataParallel`` takes in this torch."""
    return tuple(name for name in inspect.signature(DistributedDataParallel.__init__).parameters if name != "self")


def _check_ddp_kwargs(ddp_kwargs: dict[str, Any]) -> None:
    """Refuse a ``**ddp_kwargs`` name that ``DistributedDataParallel`` would reject only once the model is wrapped."""
    accepted = [name for name in _ddp_parameters() if name not in _SET_BY_STRATEGY]
    for name in ddp_kwargs:
        if name in _UNSUPPORTED_LIGHTNING:
            raise MisconfigurationError(f"DDPStrategy({name}=...) is not supported: {_UNSUPPORTED_LIGHTNING[name]}")
        if name in _SET_BY_STRATEGY:
            raise MisconfigurationError(
                f"DDPStrategy({name}=...) is not valid: the strategy sets DistributedDataParallel's {name!r} itself "
                f"({_SET_BY_STRATEGY[name]}). Hint: remove {name}=."
            )
        if name not in accepted:
            close = difflib.get_close_matches(name, [*accepted, "ddp_comm_hook", "ddp_comm_state"], n=1, cutoff=0.6)
            raise MisconfigurationError(
                f"DDPStrategy({name}=...) is not valid: it is neither an argument of the strategy nor one of "
                f"torch's DistributedDataParallel, which takes {', '.join(accepted)}. Hint: "
                + (f"did you mean {close[0]}=?" if close else "remove it.")
            )


def _check_comm_hook(hook: object, state: object, wrapper: object) -> None:
    """Refuse a comm hook that is not callable, and a state or wrapper given without a hook (ignored otherwise)."""
    for name, value in (("ddp_comm_hook", hook), ("ddp_comm_wrapper", wrapper)):
        if value is not None and not callable(value):
            raise MisconfigurationError(
                f"{name}={value!r} is not valid: give a function. Hint: for example "
                "torch.distributed.algorithms.ddp_comm_hooks.default_hooks."
                + ("fp16_compress_hook." if name == "ddp_comm_hook" else "fp16_compress_wrapper.")
            )
    if hook is None:
        given = [
            name for name, value in (("ddp_comm_state", state), ("ddp_comm_wrapper", wrapper)) if value is not None
        ]
        if given:
            raise MisconfigurationError(
                f"{' and '.join(f'{name}=' for name in given)} given without ddp_comm_hook=, so it would do nothing. "
                "Hint: give the hook too, as in DDPStrategy(ddp_comm_hook=powerSGD_hook, "
                "ddp_comm_state=PowerSGDState(...))."
            )
