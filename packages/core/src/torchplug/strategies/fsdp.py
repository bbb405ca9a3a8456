"""Fully sharded data parallel, with torch's FSDP2 ``fully_shard``: each process holds a shard of the model.

Works on any accelerator whose process-group backend supports the collectives (gloo on the CPU,
NCCL on GPUs). Checkpoints are written as full, unsharded state dicts through the CheckpointIO,
so they load anywhere (``Module.load_from_checkpoint``, a single device, another world size).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import timedelta
from typing import Any, Final

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from typing_extensions import TypeIs, override

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.ddp import DDPStrategy

__all__ = ["FSDPStrategy"]

#: What ``auto_wrap_policy`` accepts: module classes to shard on their own, or a ``module -> bool`` function.
WrapPolicy = Iterable[type[torch.nn.Module]] | Callable[[torch.nn.Module], bool]


def _call_as_forward(module: torch.nn.Module, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``module.<method>`` through ``module.__call__``, so FSDP's forward hooks gather the parameters.

    For the duration of the call, an instance attribute ``forward`` shadows the class's method;
    the instance's attributes are then left as they were.
    """
    attributes = vars(module)
    shadowed = attributes.get("forward", _NOTHING)

    def restore() -> None:
        if shadowed is _NOTHING:
            attributes.pop("forward", None)
        else:
            attributes["forward"] = shadowed

    def redirected(*inner_args: Any, **inner_kwargs: Any) -> Any:
        restore()  # nested self(x) calls see the real forward
        return getattr(module, method)(*inner_args, **inner_kwargs)

    attributes["forward"] = redirected
    try:
        return module(*args, **kwargs)
    finally:
        restore()


_NOTHING: Final = object()


def _lists_classes(policy: WrapPolicy) -> TypeIs[Iterable[type[torch.nn.Module]]]:
    """Whether a wrap policy is a collection of module classes (else it is a ``module -> bool`` function)."""
    return isinstance(policy, (set, frozenset, list, tuple)) or not callable(policy)


class FSDPStrategy(DDPStrategy):
    """Shard parameters, gradients and optimizer state over every process (``torch.distributed.fsdp.fully_shard``).

    Args:
        auto_wrap_policy: Which submodules become their own shard unit (gathered one at a time,
            which lowers peak memory): a set of module classes (for example your transformer block
            class), or a function ``module -> bool``. None shards the whole model as one unit.
        cpu_offload: Keep parameters, gradients and optimizer state on the CPU between uses.
        reshard_after_forward: Free gathered parameters after forward (saves memory, costs a
            second gather in backward).
        param_dtype: Compute dtype of the gathered parameters (FSDP's own mixed precision); None
            keeps the parameters' dtype. Independent of the precision plugin's autocast.
        reduce_dtype: Dtype of the gradient reduction; None keeps the gradients' dtype.
        start_method, accelerator, precision, checkpoint_io, cluster_environment, parallel_devices,
            process_group_backend, timeout: As for :class:`DDPStrategy`.
    """

    def __init__(
        self,
        auto_wrap_policy: WrapPolicy | None = None,
        cpu_offload: bool = False,
        reshard_after_forward: bool = True,
        param_dtype: torch.dtype | None = None,
        reduce_dtype: torch.dtype | None = None,
        start_method: str = "popen",
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        super().__init__(
            start_method,
            False,
            accelerator,
            precision,
            checkpoint_io,
            cluster_environment,
            parallel_devices,
            process_group_backend,
            timeout,
        )
        self.auto_wrap_policy = auto_wrap_policy
        self.cpu_offload = cpu_offload
        self.reshard_after_forward = reshard_after_forward
        self.mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)

    def _wraps(self, module: torch.nn.Module) -> bool:
        policy = self.auto_wrap_policy
        if policy is None:
            return False
        if _lists_classes(policy):
            return isinstance(module, tuple(policy))
        return bool(policy(module))

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Shard the submodules the wrap policy selects, then the whole module."""
        mesh = init_device_mesh(self.root_device.type, (self.world_size,))
        options: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": self.mp_policy,
        }
        if self.cpu_offload:
            options["offload_policy"] = CPUOffloadPolicy()
        for child in reversed(list(module.modules())):  # innermost first, as fully_shard requires
            if child is not module and self._wraps(child) and not isinstance(child, FSDPModule):
                fully_shard(child, **options)
        fully_shard(module, **options)
        return module

    @override
    def model_to_device(self) -> None:
        """Move the module to this process's device (the CPU when offloading)."""
        assert self.module is not None
        if not self.cpu_offload:
            self.module.to(self.root_device)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``training_step`` through the module's ``__call__`` so FSDP gathers its parameters."""
        assert self.precision is not None and self.model is not None
        with self.precision.forward_context():
            return _call_as_forward(self.model, "training_step", *args, **kwargs)

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``validation_step`` through the module's ``__call__``."""
        assert self.precision is not None and self.model is not None
        with self.precision.forward_context():
            return _call_as_forward(self.model, "validation_step", *args, **kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``test_step`` through the module's ``__call__``."""
        assert self.precision is not None and self.model is not None
        with self.precision.forward_context():
            return _call_as_forward(self.model, "test_step", *args, **kwargs)

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``predict_step`` through the module's ``__call__``."""
        assert self.precision is not None and self.model is not None
        with self.precision.forward_context():
            return _call_as_forward(self.model, "predict_step", *args, **kwargs)

    @contextlib.contextmanager
    @override
    def no_backward_sync(self, enabled: bool = True) -> Generator[None, None, None]:
        """Accumulate unsharded gradients locally inside the block (no reduce-scatter)."""
        model = self.model
        if not enabled or not isinstance(model, FSDPModule):
            yield
            return
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    _FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)

    @override
    def module_state_dict(self) -> dict[str, Any]:
        """The full state dict, gathered on the CPU (every process must call this; rank 0 gets it)."""
        assert self.model is not None
        return get_model_state_dict(self.model, options=self._FULL)

    @override
    def load_module_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load a full state dict; each process keeps its shard."""
        assert self.model is not None
        options = StateDictOptions(full_state_dict=True, strict=strict)
        set_model_state_dict(self.model, dict(state_dict), options=options)

    @override
    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's full state dict (every process must call this)."""
        assert self.model is not None
        return get_optimizer_state_dict(self.model, optimizer, options=self._FULL)

    @override
    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]) -> None:
        """Load a full optimizer state dict into the sharded optimizer."""
        assert self.model is not None
        set_optimizer_state_dict(
            self.model, optimizer, dict(state_dict), options=StateDictOptions(full_state_dict=True)
        )

    @override
    def clip_gradients(self, optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Clip sharded gradients (the norm is computed over all shards)."""
        if algorithm not in ("norm", "value"):
            raise MisconfigurationError(f"gradient_clip_algorithm={algorithm!r}: choose 'norm' or 'value'.")
        super().clip_gradients(optimizer, clip_val, algorithm)

    @override
    def __repr__(self) -> str:
        return f"FSDPStrategy(start_method={self.start_method!r}, cpu_offload={self.cpu_offload})"
