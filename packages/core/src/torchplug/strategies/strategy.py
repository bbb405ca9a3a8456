"""The Strategy base class: how the model is spread over devices and processes.

A Strategy holds an Accelerator, a Precision, a CheckpointIO and a ClusterEnvironment. The
Trainer talks to hardware, processes, numerics and storage only through it.

This module imports no torch at import time, so plugin modules may import it freely.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.precision.precision import Precision
from torchplug.utilities.rank_zero import log

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

    from torchplug._registry import Registry
    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.strategies.launcher import Launcher
    from torchplug.trainer.trainer import Trainer

__all__ = ["Strategy"]

T = TypeVar("T")

_move_to_device: Callable[[Any, torch.device], Any] | None = None


class Strategy(ABC):
    """How training is spread over devices and processes (one device, DDP, FSDP, XLA, ...).

    Subclasses implement the abstract members; everything else has a working single-process
    default.

    A strategy is assembled in two steps: its constructor takes the components the user wants
    to fix, and :meth:`attach` gives it the rest and makes it ready (the Trainer calls it once,
    with what it resolved from its arguments). An instance component passed to the strategy's
    constructor always wins over the one given to :meth:`attach`. Vendors override
    :meth:`set_world_ranks` and :meth:`configure_launcher`, which :meth:`attach` calls, rather
    than :meth:`attach` itself.

    Example, without a Trainer::

        strategy = DDPStrategy(start_method="spawn", precision=MixedPrecision("bf16-mixed"))
        strategy.attach(
            accelerator=CPUAccelerator(),
            cluster_environment=LocalEnvironment(),
            parallel_devices=[torch.device("cpu")] * 2,
        )  # keeps its bf16-mixed precision, computes the ranks, sets a spawning launcher

    Args:
        accelerator: The hardware, or None to let the Trainer choose.
        precision: The numerics plugin, or None for the Trainer's choice.
        checkpoint_io: The storage plugin, or None for the accelerator's default.
        cluster_environment: The rank/rendezvous source, or None for the detected one.

    Attributes:
        is_distributed: Whether this strategy runs more than one process (and so needs a cluster
            environment). A strategy that is not is refused with ``devices`` or ``num_nodes``
            above 1, naming the accelerator's ``parallel_strategy`` as the fix.
        restore_checkpoint_after_setup: Whether a checkpoint is restored after :meth:`setup`
            (sharded strategies, whose parameters exist only once wrapped) instead of before.
        handles_gradient_accumulation: Whether the strategy accumulates gradients itself (on the
            device); the Trainer then calls the optimizer step on every batch.
    """

    is_distributed: ClassVar[bool] = False
    restore_checkpoint_after_setup: ClassVar[bool] = False
    handles_gradient_accumulation: ClassVar[bool] = False

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
    ) -> None:
        self.accelerator = accelerator
        self.precision = precision
        self._checkpoint_io = checkpoint_io
        self.cluster_environment = cluster_environment
        self.launcher: Launcher | None = None
        self.parallel_devices: list[torch.device] | None = None
        self.num_nodes = 1
        self.module: torch.nn.Module | None = None
        self.model: torch.nn.Module | None = None
        self.optimizers: list[Optimizer] = []
        self._module_backward: Callable[..., Any] | None = None  # the module's own backward hook, if it has one
        self._configure_optimizers: Callable[[], list[Optimizer]] | None = None  # kept by setup() for a rebuild

    # -- components ---------------------------------------------------------------------------

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint IO in use (created on first use: the core's ``torch`` IO by default)."""
        if self._checkpoint_io is None:
            from torchplug.io.torch_io import TorchCheckpointIO

            self._checkpoint_io = TorchCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO | None) -> None:
        self._checkpoint_io = io

    @property
    def own_devices(self) -> list[torch.device] | None:
        """The devices this strategy was constructed with; None when it takes the Trainer's ``devices=``.

        The Trainer asks it before :meth:`attach`: such devices win over ``devices=`` (a
        different ``devices=`` is warned about), and must be devices of the accelerator.
        """
        return self.parallel_devices

    @property
    def default_checkpoint_io(self) -> str | None:
        """The checkpoint IO (a registry name) this strategy needs unless one is given; None: the accelerator's choice.

        ``FSDPStrategy(state_dict_type="sharded")`` names ``"dcp"``.
        """
        return None

    @property
    def has_checkpoint_io(self) -> bool:
        """Whether a checkpoint IO was set (by the user or the Trainer), without creating the default."""
        return self._checkpoint_io is not None

    def precision_for(self, precision: str) -> str:
        """Map a precision registry name to the one this strategy needs (default: the same name).

        Called after ``Accelerator.precision_for``; a sharded or vendor strategy returns its own
        precision plugin's name here.
        """
        return precision

    def attach(
        self,
        *,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        num_nodes: int = 1,
    ) -> None:
        """Give the strategy the components it does not hold yet, compute the ranks and set the launcher.

        This is the one way to make a strategy ready for :meth:`setup_environment`; the Trainer
        calls it once, when it is created. Each component already held (passed to the constructor,
        or created by it) is kept: an instance component passed to the strategy's constructor
        always wins over the one given here. Then, in order:

        1. ``precision.connect_accelerator(accelerator)``: the precision learns the hardware (the
           autocast device type, for mixed precision);
        2. :meth:`set_world_ranks`: the cluster environment learns the global rank and world size,
           so ``global_rank``, ``world_size`` and ``is_global_zero`` are right from here on;
        3. :meth:`configure_launcher`: :attr:`launcher` is set (None when the strategy starts no
           processes), after the strategy checked that it can drive the components it was given.

        Args:
            accelerator: The hardware to run on. Required unless the strategy holds one.
            precision: The numerics plugin; None (and none held) means full precision, ``Precision()``.
            checkpoint_io: The storage plugin; None (and none held) means the core's ``torch`` IO,
                created on first use.
            cluster_environment: Where ranks and the rendezvous come from. Required for a
                distributed strategy (:attr:`is_distributed`) unless it holds one.
            parallel_devices: The ``torch.device`` of each process on this node, for example
                ``accelerator.get_parallel_devices(accelerator.parse_devices(2))``; devices given to
                the constructor are kept.
            num_nodes: How many nodes take part (each runs ``len(parallel_devices)`` processes).

        Raises:
            MisconfigurationError: No accelerator, no cluster environment for a distributed
                strategy, an invalid ``num_nodes``, or components the strategy cannot drive (from
                :meth:`configure_launcher` or the precision); the message says which.
        """
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise MisconfigurationError(f"num_nodes={num_nodes!r} is not valid: give a positive int.")
        if self.accelerator is None:
            self.accelerator = accelerator
        if self.accelerator is None:
            raise MisconfigurationError(
                f"{type(self).__name__}.attach() needs an accelerator: pass accelerator= "
                "(for example CPUAccelerator())."
            )
        if self.cluster_environment is None:
            self.cluster_environment = cluster_environment
        if self.is_distributed and self.cluster_environment is None:
            raise MisconfigurationError(
                f"{type(self).__name__} runs several processes, so attach() needs cluster_environment= "
                "(for example LocalEnvironment())."
            )
        if self.precision is None:
            self.precision = precision if precision is not None else Precision()
        if not self.has_checkpoint_io:
            self._checkpoint_io = checkpoint_io
        if self.parallel_devices is None:
            self.parallel_devices = parallel_devices
        self.num_nodes = num_nodes
        self.precision.connect_accelerator(self.accelerator)
        self.set_world_ranks()
        self.configure_launcher()

    def set_world_ranks(self) -> None:
        """Tell the cluster environment the global rank and world size this strategy computes.

        Called by :meth:`attach`, and by parallel strategies again in :meth:`setup_environment`
        (a spawned worker learns its local rank only then). Default: nothing to tell (one process).
        """

    def configure_launcher(self) -> None:
        """Check the attached components and set :attr:`launcher`; called by :meth:`attach`, last.

        Override it to start processes (set a :class:`~torchplug.strategies.launcher.Launcher`)
        and to refuse components the strategy cannot drive (raise ``MisconfigurationError``
        naming the accelerator to use). Default: no launcher, nothing to check.
        """

    # -- where we are -------------------------------------------------------------------------

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on."""

    @property
    @abstractmethod
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0 (the one that writes logs and checkpoints)."""

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes."""
        return self.cluster_environment.global_rank() if self.cluster_environment else 0

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self.cluster_environment.local_rank() if self.cluster_environment else 0

    @property
    def node_rank(self) -> int:
        """The rank of this process's node."""
        return self.cluster_environment.node_rank() if self.cluster_environment else 0

    @property
    def world_size(self) -> int:
        """The number of processes taking part."""
        return self.cluster_environment.world_size() if self.cluster_environment else 1

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        """``num_replicas``/``rank`` for a DistributedSampler, or None when data need not be split."""
        return None

    # -- set-up -------------------------------------------------------------------------------

    def connect(self, module: torch.nn.Module, backward: Callable[..., Any] | None = None) -> None:
        """Attach the user's module (not yet moved or wrapped).

        Args:
            module: The user's module.
            backward: The module's own ``backward`` hook, where it overrides the default one (the
                run finds it); :meth:`backward` then calls it on the (scaled) loss in place of the
                precision's ``backward``. None: the precision computes the gradients.
        """
        self.module = module
        self.model = module
        self._module_backward = backward

    def setup_environment(self) -> None:
        """Prepare this process: select its device, and for parallel strategies join the process group.

        Runs in every process, before the model is moved.
        """
        assert self.accelerator is not None, "the Trainer sets the accelerator before setup_environment()"
        self.accelerator.setup_device(self.root_device)

    def setup(self, configure_optimizers: Callable[[], list[Optimizer]] | None = None) -> None:
        """Convert, move and wrap the model, then create the optimizers.

        Args:
            configure_optimizers: Creates the optimizers once the parameters are in their final
                form (after sharding). None when not training (validate, test, predict).
        """
        assert self.module is not None and self.precision is not None
        self.module = self.precision.convert_module(self.module)
        self.model = self.module
        self.model_to_device()
        self.model = self.setup_module(self.module)
        self._configure_optimizers = configure_optimizers
        if configure_optimizers is not None:
            self.optimizers = configure_optimizers()

    def setup_optimizers(self, trainer: Trainer) -> None:
        """Create the optimizers and schedulers again from the module's ``configure_optimizers``, as Lightning's does.

        For code that changes what ``configure_optimizers`` returns in the middle of a fit (a new
        learning rate, parameters unfrozen): ``trainer.strategy.setup_optimizers(trainer)``. The new
        optimizers and schedulers replace ``trainer.optimizers`` and ``trainer.lr_scheduler_configs``;
        training uses them from the next epoch's first batch (call it in ``on_train_epoch_start``
        to use them in that epoch). :meth:`setup` creates the first ones during ``fit``.

        Args:
            trainer: The Trainer running this strategy (Lightning's signature; the optimizers are
                made for the module this strategy was set up with).

        Raises:
            MisconfigurationError: The strategy was not set up for ``fit`` (validate, test, predict
                and a strategy not set up yet have no optimizers to rebuild).
        """
        if self._configure_optimizers is None:
            raise MisconfigurationError(
                f"{type(self).__name__}.setup_optimizers(trainer): this strategy was not set up for fit(), so there "
                "are no optimizers to rebuild. Hint: call it during fit (a callback's on_train_epoch_start, for "
                "example); validate, test and predict run without optimizers."
            )
        self.optimizers = self._configure_optimizers()

    @abstractmethod
    def model_to_device(self) -> None:
        """Move :attr:`module` to :attr:`root_device`."""

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Wrap the module for this strategy (DDP, FSDP sharding...); the default returns it as is."""
        return module

    def process_dataloader(self, dataloader: Iterable[Any]) -> Iterable[Any]:
        """Adapt a dataloader for this strategy (a device loader, a vendor DataLoader...). Default: as is."""
        return dataloader

    def batch_to_device(self, batch: Any, device: torch.device | None = None) -> Any:
        """Move every tensor in ``batch`` (lists, tuples, dicts, dataclasses) to the device, then convert it.

        The precision plugin converts the batch (``64-true`` and ``*-true`` cast floating-point inputs).
        """
        global _move_to_device
        if _move_to_device is None:  # imported on first use: this module must not import torch
            from torchplug.utilities import apply

            _move_to_device = apply.move_to_device
        batch = _move_to_device(batch, device or self.root_device)
        return self.precision.convert_input(batch) if self.precision is not None else batch

    # -- steps --------------------------------------------------------------------------------

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module's ``training_step`` under the precision's forward context."""
        return self._run_step("training_step", *args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module's ``validation_step`` under the precision's forward context."""
        return self._run_step("validation_step", *args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module's ``test_step`` under the precision's forward context."""
        return self._run_step("test_step", *args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module's ``predict_step`` under the precision's forward context."""
        return self._run_step("predict_step", *args, **kwargs)

    def _run_step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        assert self.precision is not None and self.module is not None
        # The user's method, looked up by name: torch types a module's attributes as Tensor | Module.
        step: Callable[..., Any] = getattr(self.module, name)
        with self.precision.forward_context():
            return step(*args, **kwargs)

    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Compute gradients of ``loss`` through the precision plugin (which may scale it).

        Extra arguments (``retain_graph=True``... from ``manual_backward``) reach ``loss.backward``.
        Where the module overrides its ``backward`` hook, that hook computes the gradients of the
        (scaled) loss in place of the precision's ``backward``, and receives them.
        """
        assert self.precision is not None and self.model is not None
        loss = self.precision.pre_backward(loss, self.model)
        module_backward = self._module_backward
        if module_backward is None:
            self.precision.backward(loss, self.model, optimizer, *args, **kwargs)
        else:
            module_backward(loss, *args, **kwargs)
        self.precision.post_backward(loss, self.model)

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Step ``optimizer`` through the precision plugin; ``closure`` computes loss and gradients."""
        assert self.precision is not None and self.model is not None
        return self.precision.optimizer_step(optimizer, self.model, closure)

    def zero_grad(self, optimizer: Optimizer, set_to_none: bool = True) -> None:
        """Reset the gradients of ``optimizer``'s parameters (at the start of each accumulation window).

        Called by the loop, by ``Module.optimizer_zero_grad``'s default and by ``zero_grad()`` on
        the optimizers of manual optimization. Default: ``optimizer.zero_grad(set_to_none=...)``.
        A strategy whose engine owns the gradient buffers (DeepSpeed keeps them inside its
        optimizer and resets them in its step) overrides it.
        """
        optimizer.zero_grad(set_to_none=set_to_none)

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Clip the gradients of ``optimizer``'s parameters (``algorithm``: ``"norm"`` or ``"value"``)."""
        assert self.precision is not None
        self.precision.clip_gradients(optimizer, clip_val, algorithm)

    @contextlib.contextmanager
    def no_backward_sync(self, enabled: bool = True) -> Generator[None, None, None]:
        """Skip gradient synchronisation inside the block (for gradient accumulation). Default: nothing to skip."""
        yield

    # -- collectives --------------------------------------------------------------------------

    @abstractmethod
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""

    @abstractmethod
    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send ``obj`` (any picklable object) from rank ``src`` to every process; return it everywhere."""

    @abstractmethod
    def all_gather(self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process, stacked on a new first dimension of size world_size."""

    @abstractmethod
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str | None = "mean") -> Any:
        """Reduce ``tensor`` over every process (``reduce_op``: ``"mean"``, ``"sum"``, ``"max"``, ``"min"``)."""

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Combine a per-process decision: True if every process (``all=True``) or any process said True."""
        return decision

    # -- contexts -----------------------------------------------------------------------------

    @property
    def supports_inference_mode(self) -> bool:
        """Whether validation, test and predict may run under ``torch.inference_mode`` (default: True).

        A tensor made under inference mode can never be updated in place outside it. A strategy
        whose evaluation writes into tensors that training reuses (FSDP gathers parameters into
        buffers it keeps) returns False; the loops then use ``torch.no_grad`` even with
        ``Trainer(inference_mode=True)``, as Lightning does for FSDP.
        """
        return True

    @contextlib.contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        """A context in which to build layers directly sharded (for sharded strategies). Default: nothing."""
        yield

    @contextlib.contextmanager
    def tensor_init_context(self) -> Generator[None, None, None]:
        """A context for creating tensors with the precision's dtype on the right device."""
        assert self.precision is not None
        with self.precision.tensor_init_context():
            yield

    # -- checkpoints --------------------------------------------------------------------------

    def module_state_dict(self) -> dict[str, Any]:
        """The module's state dict, as written into checkpoints.

        Whole tensors; with a collective checkpoint IO (``dcp``), DCP's form of it (each process's
        own shards, for strategies that shard).
        """
        assert self.module is not None
        if self.checkpoint_io.collective:
            from torchplug.strategies import _checkpoint_state

            return _checkpoint_state.model_state(self._checkpoint_model())
        return self.module.state_dict()

    def load_module_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load a state dict into the module (sharding it where the strategy shards)."""
        assert self.module is not None
        self.module.load_state_dict(state_dict, strict=strict)

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The optimizer's state dict, as written into checkpoints.

        ``optimizer.state_dict()``; with a collective checkpoint IO, keyed by parameter name (DCP's form).
        """
        if self.checkpoint_io.collective:
            from torchplug.strategies import _checkpoint_state

            assert self.module is not None
            return _checkpoint_state.optimizer_state(self._checkpoint_model(), self.module, optimizer)
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, optimizer: Optimizer, state_dict: Mapping[str, Any]) -> None:
        """Load an optimizer state dict, numbered (``optimizer.state_dict()``) or keyed by parameter name."""
        from torchplug.strategies import _checkpoint_state

        if not _checkpoint_state.is_named_optimizer_state(state_dict):
            optimizer.load_state_dict(dict(state_dict))
            return
        assert self.module is not None
        _checkpoint_state.load_optimizer_state(self._checkpoint_model(), self.module, optimizer, state_dict)

    def _checkpoint_model(self) -> torch.nn.Module:
        """The user's module: DCP's state-dict functions name its parameters as ``module.state_dict()`` does.

        (Not :attr:`model`: a DDP wrapper around a step dispatcher would add prefixes. FSDP2 shards
        the module in place, so it is the module either way.)
        """
        assert self.module is not None
        return self.module

    def checkpoint_target(self) -> dict[str, Any]:
        """What a sharded checkpoint is read into on this process: the live model and optimizer states in DCP's form.

        Its tensors are this process's own (shards under FSDP): a collective IO overwrites them in
        place, so the checkpoint is resharded to this run's layout, whatever wrote it.
        """
        from torchplug.strategies import _checkpoint_state

        model = self._checkpoint_model()
        assert self.module is not None
        target: dict[str, Any] = {"state_dict": _checkpoint_state.model_state(model)}
        if self.optimizers:
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            # DCP's own function: it creates optimizer state not stepped yet, for the checkpoint's to land in.
            target["optimizer_states"] = [get_optimizer_state_dict(model, o) for o in self.optimizers]
        return target

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` through the checkpoint IO: from global rank 0, or every process for a collective IO."""
        io = self.checkpoint_io
        if io.collective or self.is_global_zero:
            io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def load_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        """Read a checkpoint (every rank reads it).

        A collective IO reads each process's shards into :meth:`checkpoint_target`. A sharded
        checkpoint directory given to another IO is read the same way, by a ``dcp`` IO made for
        it (so one process, or FSDP with ``state_dict_type="full"``, resumes from sharded checkpoints).
        """
        io = self.checkpoint_io
        if not io.collective:
            from torchplug.io._dcp_layout import is_distributed_checkpoint

            if not is_distributed_checkpoint(path):
                return io.load_checkpoint(path, map_location="cpu", weights_only=weights_only)
            from torchplug.io.dcp_io import DistributedCheckpointIO

            log.info("%s is a sharded checkpoint: reading it with DistributedCheckpointIO", path)
            io = DistributedCheckpointIO()
        return io.load_distributed(path, self.checkpoint_target(), weights_only=weights_only)

    def remove_checkpoint(self, filepath: str) -> None:
        """Delete a checkpoint through the checkpoint IO, from global rank 0 only."""
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(filepath)

    # -- end ----------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Release everything: unwrap the model, tear down the precision, IO and accelerator."""
        if self.precision is not None:
            self.precision.teardown()
        if self._checkpoint_io is not None:
            self._checkpoint_io.teardown()
        if self.accelerator is not None:
            self.accelerator.teardown()
        self.model = self.module

    def on_exception(self, exception: BaseException) -> None:
        """Called when training fails, before teardown (for example to stop other processes)."""

    # -- Lightning compatibility ----------------------------------------------------------------

    @classmethod
    def register_strategies(cls, registry: Registry[Strategy]) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``.

        Called when the class itself is named by a ``torchplug.plugins`` entry point; the
        parameter may have any name (Lightning's is ``strategy_registry``).
        """

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
