"""The Trainer's read-only views: its plugins, ranks, progress, metrics and data, as users and callbacks read them."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug.loops.optimization import batches_per_optimizer_step
from torchplug.trainer.states import RunningStage, TrainerFn, TrainerStatus

if TYPE_CHECKING:
    import torch

    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.callbacks.callback import Callback
    from torchplug.core.datamodule import DataModule
    from torchplug.core.module import Module
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.loggers.logger import Logger
    from torchplug.loops.fit import FitLoop
    from torchplug.loops.state import RunState
    from torchplug.precision.precision import Precision
    from torchplug.strategies.strategy import Strategy
    from torchplug.trainer.checkpoint_connector import CheckpointConnector
    from torchplug.trainer.connector import Resolution
    from torchplug.trainer.data import DataConnector
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector
    from torchplug.trainer.optimizers import LRSchedulerConfig
    from torchplug.trainer.preemption import PreemptionWatch
    from torchplug.trainer.states import TrainerState

__all__ = ["TrainerProperties"]


class _LoopArgument:
    """A Trainer attribute that is one of its loop arguments: read from the run's :class:`LoopConfig`.

    Setting it goes through :meth:`RunState.configure` (checked as the argument is, or refused when
    the value cannot change once the Trainer is made): the one door to each value.
    """

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: TrainerProperties | None, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(trainer._run.config, self.name)

    def __set__(self, trainer: TrainerProperties, value: Any) -> None:
        trainer._run.configure(self.name, value)


class TrainerProperties:
    """Properties of :class:`torchplug.Trainer` (a mixin: the Trainer sets the attributes below).

    The loop arguments (``max_epochs``, ``limit_val_batches``...) are views of the run's
    :class:`~torchplug.loops.state.LoopConfig`, and ``module``, ``optimizers``, ``should_stop``
    and ``state`` views of its :class:`~torchplug.loops.state.RunState`.
    """

    strategy: Strategy
    fit_loop: FitLoop
    _callbacks: list[Callback]
    loggers: list[Logger]
    _run: RunState
    _resolution: Resolution
    _hooks: HookRunner
    _logging: LoggerConnector
    _data: DataConnector
    _checkpoints: CheckpointConnector
    _preemption: PreemptionWatch

    # -- the loop arguments (LoopConfig) and the run's state (RunState) --------------------------------

    max_epochs: Any = _LoopArgument()
    max_steps: Any = _LoopArgument()
    min_epochs: Any = _LoopArgument()
    min_steps: Any = _LoopArgument()
    limit_train_batches: Any = _LoopArgument()
    limit_val_batches: Any = _LoopArgument()
    limit_test_batches: Any = _LoopArgument()
    limit_predict_batches: Any = _LoopArgument()
    val_check_interval: Any = _LoopArgument()
    check_val_every_n_epoch: Any = _LoopArgument()
    num_sanity_val_steps: Any = _LoopArgument()
    log_every_n_steps: Any = _LoopArgument()
    accumulate_grad_batches: Any = _LoopArgument()
    gradient_clip_val: Any = _LoopArgument()
    gradient_clip_algorithm: Any = _LoopArgument()
    inference_mode: Any = _LoopArgument()
    use_distributed_sampler: Any = _LoopArgument()
    deterministic: Any = _LoopArgument()
    benchmark: Any = _LoopArgument()
    nonfinite_loss: Any = _LoopArgument()
    reload_dataloaders_every_n_epochs: Any = _LoopArgument()
    detect_anomaly: Any = _LoopArgument()
    sync_batchnorm: Any = _LoopArgument()
    enable_autolog_hparams: Any = _LoopArgument()
    barebones: Any = _LoopArgument()
    fast_dev_run: Any = _LoopArgument()
    overfit_batches: Any = _LoopArgument()
    default_root_dir: Any = _LoopArgument()

    @property
    def state(self) -> TrainerState:
        """The call, stage and status in progress."""
        return self._run.status

    @property
    def module(self) -> Module:
        """The Module of the current (or last) ``fit``/``validate``/``test``/``predict`` call (None before)."""
        return self._run.module  # type: ignore[return-value]  # None only before the first call, as in Lightning

    @module.setter
    def module(self, module: Module) -> None:
        self._run.module = module

    @property
    def datamodule(self) -> DataModule | None:
        """The DataModule of the current (or last) call, if one was given."""
        return self._run.datamodule

    @datamodule.setter
    def datamodule(self, datamodule: DataModule | None) -> None:
        self._run.datamodule = datamodule

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers ``configure_optimizers`` returned (set them to replace them, as the tuner does)."""
        return self._run.optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self._run.optimizers = optimizers

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        """The learning-rate schedulers, with when each steps."""
        return self._run.lr_scheduler_configs

    @lr_scheduler_configs.setter
    def lr_scheduler_configs(self, configs: list[LRSchedulerConfig]) -> None:
        self._run.lr_scheduler_configs = configs

    @property
    def should_stop(self) -> bool:
        """Whether training ends at the next boundary (set it to True to ask for that, as EarlyStopping does)."""
        return self._run.should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self._run.should_stop = value

    def describe(self) -> str:
        """How the hardware arguments were resolved: each choice and why (also ``core fit --resolve``)."""
        return self._resolution.describe()

    # -- plugins ------------------------------------------------------------------------------------

    @property
    def accelerator(self) -> Accelerator:
        """The Accelerator plugin in use."""
        accelerator = self.strategy.accelerator
        assert accelerator is not None, "resolution always sets the accelerator"
        return accelerator

    @property
    def precision_plugin(self) -> Precision:
        """The Precision plugin in use."""
        precision = self.strategy.precision
        assert precision is not None, "resolution always sets the precision"
        return precision

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The CheckpointIO plugin in use."""
        return self.strategy.checkpoint_io

    @property
    def cluster_environment(self) -> ClusterEnvironment:
        """The ClusterEnvironment plugin in use."""
        environment = self.strategy.cluster_environment
        assert environment is not None, "resolution always sets the cluster environment"
        return environment

    @property
    def precision(self) -> str:
        """The precision's name (``"32-true"``, ``"bf16-mixed"``...)."""
        return self.precision_plugin.name

    @property
    def scaler(self) -> Any:
        """The precision's gradient scaler (``16-mixed``), or None."""
        return getattr(self.precision_plugin, "scaler", None)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        """The ``DistributedSampler`` arguments (replicas, rank) of this process, or None on one process."""
        return self.strategy.distributed_sampler_kwargs

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """Build the model inside this block to create its tensors on the device, in the precision's dtype.

        ``with trainer.init_module(): model = MyModule()`` saves a copy from the CPU (and the memory
        of a float32 copy with ``*-true`` precisions). For layers sharded as they are built, use
        ``Module.configure_model`` instead.

        Args:
            empty_init: Only None or False: skipping the weights' initialisation is not supported.
        """
        if empty_init:
            raise MisconfigurationError(
                "trainer.init_module(empty_init=True) is not supported: the weights are always initialised. "
                "Hint: leave empty_init unset, and build sharded layers in Module.configure_model."
            )
        import torch

        with torch.device(self.strategy.root_device), self.strategy.tensor_init_context():
            yield

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.is_global_zero:
            print(*args, **kwargs)

    @property
    def model(self) -> torch.nn.Module | None:
        """The model as the strategy runs it (wrapped in DDP, sharded...); None before a run."""
        return self.strategy.model

    @property
    def lightning_module(self) -> Any:
        """The Module being run (the name Lightning code uses)."""
        return self.strategy.module

    # -- processes ----------------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        """Devices (processes) per node."""
        return self._resolution.num_devices

    @property
    def device_ids(self) -> list[int]:
        """The index of each local device (0 for devices without one, such as the CPU)."""
        return [d.index or 0 for d in self.strategy.parallel_devices or []]

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self._resolution.num_nodes

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        """This process's node."""
        return self.strategy.node_rank

    @property
    def world_size(self) -> int:
        """Number of processes."""
        return self.strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes logs and checkpoints."""
        return self.strategy.is_global_zero

    # -- progress -----------------------------------------------------------------------------------

    @property
    def current_epoch(self) -> int:
        """The epoch in progress."""
        return self.fit_loop.progress.epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self.fit_loop.progress.global_step

    @property
    def preempted(self) -> bool:
        """Whether the last fit stopped for a preemption (its checkpoint was written and the job requeued)."""
        return self._preemption.preempted

    @property
    def interrupted(self) -> bool:
        """Whether the last run was interrupted (an error, Ctrl-C, or a preemption)."""
        return self.state.status is TrainerStatus.INTERRUPTED

    @property
    def sanity_checking(self) -> bool:
        """Whether the sanity-check validation is running."""
        return self.state.stage is RunningStage.SANITY_CHECKING

    @property
    def training(self) -> bool:
        """Whether training batches are running."""
        return self.state.stage is RunningStage.TRAINING

    @property
    def validating(self) -> bool:
        """Whether validation batches are running (inside ``fit`` or ``validate``)."""
        return self.state.stage is RunningStage.VALIDATING

    @property
    def testing(self) -> bool:
        """Whether test batches are running."""
        return self.state.stage is RunningStage.TESTING

    @property
    def predicting(self) -> bool:
        """Whether predict batches are running."""
        return self.state.stage is RunningStage.PREDICTING

    @property
    def evaluating(self) -> bool:
        """Whether ``validate`` or ``test`` is running."""
        return self.state.fn in (TrainerFn.VALIDATING, TrainerFn.TESTING)

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the last run started from (None for a fresh start); ModelCheckpoint never rotates it."""
        return self._checkpoints.ckpt_path

    @property
    def batches_per_optimizer_step(self) -> int:
        """Training batches per optimizer step: ``accumulate_grad_batches``, or 1 where the strategy accumulates itself.

        A strategy with ``handles_gradient_accumulation`` (the IPU's) accumulates inside its compiled
        step, on the device, so the loop steps the optimizer after every batch.
        """
        return batches_per_optimizer_step(self._run.config, self.strategy)

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the whole fit will take (for schedulers such as OneCycleLR).

        Read during ``fit`` (in ``configure_optimizers``, say), it requests the training loader
        early to count its batches.
        """
        self._data.setup_train()
        per_epoch = self.num_training_batches / self.batches_per_optimizer_step
        per_epoch = math.ceil(per_epoch) if not math.isinf(per_epoch) else per_epoch
        total = per_epoch * self.max_epochs if self.max_epochs not in (None, -1) else math.inf
        return min(total, self.max_steps) if self.max_steps != -1 else total

    # -- logging ------------------------------------------------------------------------------------

    @property
    def logger(self) -> Logger | None:
        """The first logger, or None."""
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        """The first logger's run directory, else ``default_root_dir``."""
        logger = self.logger
        directory = logger.log_dir if logger is not None else None
        return directory or self.default_root_dir

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every logged metric (what ModelCheckpoint and EarlyStopping monitor)."""
        return self._logging.callback_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``."""
        return self._logging.progress_bar_metrics

    @property
    def logged_metrics(self) -> dict[str, Any]:
        """The last values sent to the loggers."""
        return self._logging.logged_metrics

    # -- callbacks ----------------------------------------------------------------------------------

    @property
    def callbacks(self) -> list[Callback]:
        """The callbacks of this Trainer, in the order their hooks run."""
        return self._callbacks

    @callbacks.setter
    def callbacks(self, callbacks: list[Callback]) -> None:
        """Replace the callbacks; the hooks are bound anew from the next call on, even in the middle of a run.

        The tuner's finders swap the list for their trial runs and put it back afterwards.
        """
        self._callbacks = callbacks
        hooks = getattr(self, "_hooks", None)  # not yet during __init__
        if hooks is not None:
            hooks.reset()

    @property
    def checkpoint_callback(self) -> Any:
        """The first ModelCheckpoint callback, or None."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """Every ModelCheckpoint callback."""
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint

        return [c for c in self.callbacks if isinstance(c, ModelCheckpoint)]

    @property
    def early_stopping_callback(self) -> Any:
        """The first EarlyStopping callback, or None."""
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """Every EarlyStopping callback."""
        from torchplug.callbacks.early_stopping import EarlyStopping

        return [c for c in self.callbacks if isinstance(c, EarlyStopping)]

    @property
    def progress_bar_callback(self) -> Any:
        """The progress bar callback, or None."""
        from torchplug.callbacks.progress import ProgressBar

        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    # -- data ---------------------------------------------------------------------------------------

    @property
    def train_dataloader(self) -> Any:
        """The training dataloader in use."""
        return self._data.train_loader

    @property
    def val_dataloaders(self) -> Any:
        """The validation dataloader(s) in use."""
        loaders = self._data.val_loaders
        return loaders[0] if len(loaders) == 1 else loaders

    @property
    def num_training_batches(self) -> float:
        """Training batches per epoch (``inf`` for a loader without a length)."""
        return self._data.num_training_batches

    @property
    def enable_validation(self) -> bool:
        """Whether ``fit`` validates (validation data with batches, and a ``validation_step``)."""
        return self.fit_loop.validation_enabled

    @property
    def num_sanity_val_batches(self) -> list[float]:
        """Validation batches per dataloader that the sanity check runs."""
        steps = getattr(self, "num_sanity_val_steps", 0)
        return [n if steps == -1 else min(steps, n) for n in self._data.num_val_batches]

    @property
    def num_val_batches(self) -> list[float]:
        """Validation batches per dataloader (of ``fit``, or of the last ``validate()`` while it runs)."""
        if self.state.fn is TrainerFn.VALIDATING:
            return self._data.eval_batches.get(TrainerFn.VALIDATING, [])
        return self._data.num_val_batches

    @property
    def num_test_batches(self) -> list[float]:
        """Test batches per dataloader, in the last ``test()``."""
        return self._data.eval_batches.get(TrainerFn.TESTING, [])

    @property
    def num_predict_batches(self) -> list[float]:
        """Predict batches per dataloader, in the last ``predict()``."""
        return self._data.eval_batches.get(TrainerFn.PREDICTING, [])
