"""Fully sharded data parallel, with torch's FSDP2 ``fully_shard``: each process holds a shard of the model.

Works on any accelerator whose process-group backend supports the collectives (gloo on the CPU,
NCCL on GPUs). Checkpoints are either full (``state_dict_type="full"``, the default): the state is
gathered on rank 0, which writes one ordinary file through the CheckpointIO; or sharded
(``"sharded"``): every process writes its own shards, in parallel, into a checkpoint directory
through a collective CheckpointIO (``dcp``, ``torch.distributed.checkpoint``). Both load anywhere:
another number of processes, DDP, one process (``Module.load_from_checkpoint`` reads files;
``torchplug.io.consolidate_checkpoint`` turns a directory into one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping
from datetime import timedelta
from typing import Any, Final

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies import _checkpoint_state
from torchplug.strategies._fsdp_arguments import WrapPolicy, check_bool, check_dtype, offload_policy, wrap_decider
from torchplug.strategies._fsdp_arguments import lightning_options as lightning_options_of
from torchplug.strategies.ddp import DDPStrategy
from torchplug.utilities.warn import warn_once

__all__ = ["FSDPStrategy"]

_STATE_DICT_TYPES: Final = ("full", "sharded")


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


class FSDPStrategy(DDPStrategy):
    """Shard parameters, gradients and optimizer state over every process (``torch.distributed.fsdp.fully_shard``).

    Args:
        auto_wrap_policy: Which submodules become their own shard unit (gathered one at a time,
            which lowers peak memory): a set of module classes (for example your transformer block
            class), or a function ``module -> bool``; FSDP1's policies (``ModuleWrapPolicy``,
            ``functools.partial(transformer_auto_wrap_policy, ...)``), as Lightning takes them, work
            too. None shards the whole model as one unit; a policy that selects no submodule does
            the same, with a warning.
        cpu_offload: Keep parameters, gradients and optimizer state on the CPU between uses
            (True or False; a ``CPUOffloadPolicy``, or FSDP1's ``CPUOffload``, is taken as well).
        reshard_after_forward: Free gathered parameters after forward (saves memory, costs a
            second gather in backward). Default True.
        param_dtype: Compute dtype of the gathered parameters (FSDP's own mixed precision); None
            keeps the parameters' dtype. Independent of the precision plugin's autocast.
        reduce_dtype: Dtype of the gradient reduction; None keeps the gradients' dtype.
        state_dict_type: How checkpoints are written. ``"full"`` (the default, for models that fit
            one process's memory): gathered on rank 0, one ``.ckpt`` file. ``"sharded"`` (for large
            models): each process writes its shards in parallel into a checkpoint directory, with no
            gather, through the ``dcp`` checkpoint IO (the default then; ``dcp_async`` saves in the
            background); model, optimizer, schedulers, loops, callbacks and every process's random
            state are in it, and it resumes on any number of processes.
        start_method, accelerator, precision, checkpoint_io, cluster_environment, parallel_devices,
            process_group_backend, timeout: As for :class:`DDPStrategy`.
        **lightning_options: Lightning's ``FSDPStrategy`` arguments: ``sharding_strategy``
            (``"FULL_SHARD"`` or ``"SHARD_GRAD_OP"``, that is ``reshard_after_forward`` True or
            False), ``mixed_precision`` (its ``param_dtype`` and ``reduce_dtype``),
            ``use_orig_params=True`` (what FSDP2 always does), ``precision_plugin``. The others are
            refused, each with what to do instead.

    Raises:
        MisconfigurationError: An argument of the wrong type (``cpu_offload="no"`` would be
            true), an unknown ``state_dict_type``, an unknown or unsupported keyword (with the
            closest name), conflicting arguments; and those of :class:`DDPStrategy`.
    """

    def __init__(
        self,
        auto_wrap_policy: WrapPolicy | None = None,
        cpu_offload: bool | OffloadPolicy = False,
        reshard_after_forward: bool | int | None = None,
        param_dtype: torch.dtype | None = None,
        reduce_dtype: torch.dtype | None = None,
        state_dict_type: str = "full",
        start_method: str = "popen",
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = None,
        **lightning_options: Any,
    ) -> None:
        translated = lightning_options_of(lightning_options, reshard_after_forward)
        given = {"param_dtype": param_dtype, "reduce_dtype": reduce_dtype, "precision": precision}
        for name in set(translated) & {name for name, value in given.items() if value is not None}:
            raise MisconfigurationError(
                f"FSDPStrategy({name}=...) is set twice, directly and through Lightning's "
                f"{'precision_plugin' if name == 'precision' else 'mixed_precision'}=. Hint: give it once."
            )
        if reshard_after_forward is None:
            reshard_after_forward = translated.get("reshard_after_forward", True)
        elif isinstance(reshard_after_forward, bool) or not isinstance(reshard_after_forward, int):
            check_bool("reshard_after_forward", reshard_after_forward)
        super().__init__(
            start_method=start_method,
            find_unused_parameters=False,
            accelerator=accelerator,
            precision=translated.get("precision", precision),
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self.auto_wrap_policy = auto_wrap_policy
        self._wraps = wrap_decider(auto_wrap_policy)
        self._offload_policy = offload_policy(cpu_offload)
        self.cpu_offload = self._offload_policy is not None
        self.reshard_after_forward = reshard_after_forward
        self.mp_policy = MixedPrecisionPolicy(
            param_dtype=check_dtype("param_dtype", translated.get("param_dtype", param_dtype)),
            reduce_dtype=check_dtype("reduce_dtype", translated.get("reduce_dtype", reduce_dtype)),
        )
        if state_dict_type not in _STATE_DICT_TYPES:
            raise MisconfigurationError(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}): choose 'full' (one file gathered on rank 0) "
                "or 'sharded' (a directory of every process's shards, written in parallel)."
            )
        self.state_dict_type = state_dict_type

    @property
    @override
    def default_checkpoint_io(self) -> str | None:
        """``"dcp"`` for sharded checkpoints (a collective IO is needed), else the accelerator's choice."""
        return "dcp" if self.state_dict_type == "sharded" else None

    @property
    def _sharded(self) -> bool:
        return self.state_dict_type == "sharded"

    @override
    def configure_launcher(self) -> None:
        """Refuse a checkpoint IO that cannot write this ``state_dict_type``, then as for DDP."""
        if self._sharded and not self.has_checkpoint_io:  # attached without a Trainer, which would have chosen it
            from torchplug.io.dcp_io import DistributedCheckpointIO

            self.checkpoint_io = DistributedCheckpointIO()
        io = self.checkpoint_io
        if self._sharded and not io.collective:
            raise MisconfigurationError(
                f"FSDPStrategy(state_dict_type='sharded') has every process write its shards, which needs a "
                f"collective checkpoint IO; {type(io).__name__} writes one file from rank 0. Hint: use "
                "plugins=['dcp'] (or 'dcp_async'), or state_dict_type='full'."
            )
        if not self._sharded and io.collective:
            raise MisconfigurationError(
                f"FSDPStrategy(state_dict_type='full') gathers the whole state on rank 0 to write one file, but "
                f"{type(io).__name__} is a collective IO for sharded checkpoints. Hint: use "
                "FSDPStrategy(state_dict_type='sharded') with it, or a file IO such as 'torch' or 'async'."
            )
        super().configure_launcher()

    @property
    @override
    def supports_inference_mode(self) -> bool:
        """False: FSDP gathers parameters into buffers it reuses in training, which inference tensors would freeze."""
        return False

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Shard the submodules the wrap policy selects, then the whole module (warned when it selects none).

        A module this strategy already sharded (by an earlier ``fit``, before ``test`` or
        ``validate``) is used as it is: ``fully_shard`` cannot be applied twice.

        Raises:
            MisconfigurationError: The module was sharded over another number of processes or
                another device type.
        """
        if isinstance(module, FSDPModule):
            self._check_sharded_here(module)
            return module
        mesh = init_device_mesh(self.root_device.type, (self.world_size,))
        options: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": self.mp_policy,
        }
        if self._offload_policy is not None:
            options["offload_policy"] = self._offload_policy
        wraps, selected = self._wraps, 0
        if wraps is not None:
            for child in reversed(list(module.modules())):  # innermost first, as fully_shard requires
                if child is not module and not isinstance(child, FSDPModule) and wraps(child):
                    fully_shard(child, **options)
                    selected += 1
            if not selected:
                warn_once(
                    f"FSDPStrategy(auto_wrap_policy={self.auto_wrap_policy!r}) selected no submodule of "
                    f"{type(module).__name__}: the whole model is one shard unit, gathered at once in every forward "
                    "(as with auto_wrap_policy=None). Hint: name the classes of the model's repeated blocks, as in "
                    "auto_wrap_policy={MyTransformerBlock}."
                )
        fully_shard(module, **options)
        return module

    def _check_sharded_here(self, module: torch.nn.Module) -> None:
        """Refuse a module sharded on a mesh other than this run's (its parameters are DTensors on that mesh)."""
        meshes = {
            (p.device_mesh.device_type, p.device_mesh.size()) for p in module.parameters() if isinstance(p, DTensor)
        }
        here = (self.root_device.type, self.world_size)
        for device_type, size in meshes - {here}:
            raise MisconfigurationError(
                f"{type(module).__name__} is already sharded by FSDP over {size} {device_type} process(es), but this "
                f"run has {self.world_size} {self.root_device.type} process(es); a module can be sharded only once. "
                "Hint: run every stage with the same devices and strategy, or load the weights into a new module "
                "(Module.load_from_checkpoint)."
            )

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

    @override
    def module_state_dict(self) -> dict[str, Any]:
        """Full: gathered on the CPU (every process must call this; rank 0 gets it). Sharded: this process's shards."""
        assert self.model is not None
        return _checkpoint_state.model_state(self.model, full=not self._sharded)

    @override
    def load_module_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load a full state dict (each process keeps its shard) or a sharded one (``DTensor`` values)."""
        assert self.model is not None
        _checkpoint_state.load_model_state(self.model, state_dict, strict=strict)

    @override
    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state keyed by parameter name: gathered (full) or this process's shards (collective)."""
        assert self.model is not None and self.module is not None
        return _checkpoint_state.optimizer_state(self.model, self.module, optimizer, full=not self._sharded)

    @override
    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]) -> None:
        """Load an optimizer state, full or sharded, into the sharded optimizer."""
        assert self.model is not None and self.module is not None
        _checkpoint_state.load_optimizer_state(self.model, self.module, optimizer, state_dict)

    @override
    def clip_gradients(self, optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Clip sharded gradients (the norm is computed over all shards)."""
        if algorithm not in ("norm", "value"):
            raise MisconfigurationError(f"gradient_clip_algorithm={algorithm!r}: choose 'norm' or 'value'.")
        super().clip_gradients(optimizer, clip_val, algorithm)

    @override
    def __repr__(self) -> str:
        sharded = ", state_dict_type='sharded'" if self._sharded else ""
        return f"FSDPStrategy(start_method={self.start_method!r}, cpu_offload={self.cpu_offload}{sharded})"
