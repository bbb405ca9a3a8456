"""``torchplug.Trainer``: fit, validate, test and predict, on any hardware a plugin provides."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from torchplug._errors import MisconfigurationError
from torchplug._host import PluginHost
from torchplug.callbacks.callback import Callback
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.loggers.logger import Logger
from torchplug.strategies.strategy import Strategy
from torchplug.trainer import checkpointing
from torchplug.trainer.connector import Resolution, resolve
from torchplug.trainer.data import as_list, check_iterable, limit_batches, num_batches, with_distributed_sampler
from torchplug.trainer.evaluation_loop import run_evaluation, run_prediction
from torchplug.trainer.fit_loop import FitLoop
from torchplug.trainer.metrics import MetricStore
from torchplug.trainer.optimizers import LRSchedulerConfig, parse_optimizers
from torchplug.trainer.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
from torchplug.utilities.rank_zero import rank_zero_only, rank_zero_warn
from torchplug.utilities.table import print_results

__all__ = ["Trainer"]


def _overrides(obj: object, name: str, base: type) -> bool:
    return getattr(type(obj), name, None) is not getattr(base, name, None)


class Trainer:
    """Trains a :class:`torchplug.Module` through the plugin stack: hardware, processes, numerics and storage.

    Hardware arguments take registry names (``core plugins list`` shows them) or plugin instances:

    Args:
        accelerator: ``"cpu"``, ``"cuda"``, any installed name, an Accelerator instance, or ``"auto"``
            (the available accelerator with the highest priority).
        strategy: ``"ddp"``, ``"ddp_spawn"``, ``"fsdp"``, any installed name, a Strategy instance, or
            ``"auto"`` (the accelerator's default for the number of devices).
        devices: A count, ``-1`` or ``"auto"`` for all, or device ids (``"0,2"``, ``[0, 2]``).
        num_nodes: Number of machines.
        precision: ``"32-true"`` (default), ``"bf16-mixed"``, ``"16-mixed"``, ``"64-true"``, ``"16-true"``,
            ``"bf16-true"`` (or 64/32/16/"bf16"), any installed name, or a Precision instance.
        plugins: Precision, CheckpointIO and ClusterEnvironment instances or names (``["slurm", "async"]``).
        logger: True (a CSVLogger under ``default_root_dir``), False, a Logger, or a list of them.
        callbacks: Callbacks to add to the defaults (checkpointing and the progress bar).
        fast_dev_run: Run 1 (or n) batches of everything, without logging or checkpoints, to find bugs fast.
        max_epochs: Stop after this many epochs (default 1000 when neither it nor ``max_steps`` is set;
            -1 for no limit).
        min_epochs: Do not stop early (EarlyStopping) before this many epochs.
        max_steps: Stop after this many optimizer steps (-1: no limit).
        min_steps: Do not stop early before this many steps.
        limit_train_batches: Batches per epoch: an int, or a float fraction (the same for the others).
        limit_val_batches: Validation batches per run.
        limit_test_batches: Test batches.
        limit_predict_batches: Predict batches.
        val_check_interval: Validate every this fraction of an epoch (float) or this many batches (int).
        check_val_every_n_epoch: Validate every n epochs (None: count ``val_check_interval`` over epochs).
        num_sanity_val_steps: Validation batches run before training to catch bugs early (-1: all).
        log_every_n_steps: Send step metrics to the loggers every n optimizer steps.
        enable_checkpointing: Add a ModelCheckpoint when none is given.
        enable_progress_bar: Add a progress bar (it stays quiet when the output is not a terminal).
        accumulate_grad_batches: Step the optimizer every n batches, summing their gradients.
        gradient_clip_val: Clip gradients to this norm (or value); None or 0 disables clipping.
        gradient_clip_algorithm: ``"norm"`` (default) or ``"value"``.
        deterministic: Use deterministic algorithms (``"warn"`` only warns about nondeterministic ones).
        inference_mode: Evaluate under ``torch.inference_mode`` (False: ``torch.no_grad``).
        use_distributed_sampler: Give each process its own shard of plain DataLoaders.
        default_root_dir: Where logs and checkpoints go by default (the current directory).
    """

    def __init__(
        self,
        *,
        accelerator: Any = "auto",
        strategy: Any = "auto",
        devices: Any = "auto",
        num_nodes: int = 1,
        precision: Any = None,
        plugins: Any = None,
        logger: bool | Logger | Iterable[Logger] | None = None,
        callbacks: Callback | Iterable[Callback] | None = None,
        fast_dev_run: bool | int = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        deterministic: bool | str | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        default_root_dir: str | os.PathLike[str] | None = None,
        plugin_host: PluginHost | None = None,
    ) -> None:
        self._resolution: Resolution = resolve(
            accelerator, devices, strategy, precision, plugins, num_nodes, host=plugin_host
        )
        self.strategy: Strategy = self._resolution.strategy
        self.default_root_dir = os.fspath(default_root_dir) if default_root_dir is not None else os.getcwd()
        self._check_loop_arguments(
            max_epochs,
            max_steps,
            accumulate_grad_batches,
            gradient_clip_algorithm,
            log_every_n_steps,
            num_sanity_val_steps,
            check_val_every_n_epoch,
        )
        self.fast_dev_run = int(fast_dev_run)
        if isinstance(fast_dev_run, bool) is False and self.fast_dev_run < 0:
            raise MisconfigurationError(f"fast_dev_run={fast_dev_run!r}: give True, False or a positive int.")
        dev = self.fast_dev_run
        self.max_epochs = 1 if dev else (max_epochs if max_epochs is not None or max_steps != -1 else 1000)
        self.min_epochs, self.min_steps = min_epochs, min_steps
        self.max_steps = dev if dev else max_steps
        self.limit_train_batches = dev if dev else limit_train_batches
        self.limit_val_batches = dev if dev else limit_val_batches
        self.limit_test_batches = dev if dev else limit_test_batches
        self.limit_predict_batches = dev if dev else limit_predict_batches
        self.val_check_interval = 1.0 if dev or val_check_interval is None else val_check_interval
        self.check_val_every_n_epoch = 1 if dev else check_val_every_n_epoch
        self.num_sanity_val_steps = 0 if dev else (2 if num_sanity_val_steps is None else num_sanity_val_steps)
        self.log_every_n_steps = log_every_n_steps or 50
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm or "norm"
        self.inference_mode = inference_mode
        self.use_distributed_sampler = use_distributed_sampler
        self._set_deterministic(deterministic)
        self.callbacks: list[Callback] = self._build_callbacks(callbacks, enable_checkpointing, enable_progress_bar)
        self.loggers: list[Logger] = [] if dev else self._build_loggers(logger)
        self.state = TrainerState()
        self.should_stop = False
        self.fit_loop = FitLoop(self)
        self.module: Module = None  # type: ignore[assignment]
        self.datamodule: DataModule | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self._results: MetricStore = None  # type: ignore[assignment]
        self._train_loader: Any = None
        self.num_training_batches: float = math.inf
        self._val_loaders: list[Any] = []
        self.num_val_batches: list[float] = []
        self.num_test_batches: list[float] = []
        self.num_predict_batches: list[float] = []
        #: The checkpoint the last run started from (None for a fresh start); ModelCheckpoint never rotates it away.
        self.ckpt_path: str | None = None
        self._hook_cache: dict[tuple[str, bool | None], list[Callable[..., Any]]] = {}
        self._step_schedulers = False
        self._watch_preemption = False
        self._stop_now = False
        self._logged_metrics: dict[str, float] = {}
        self._recovered_metrics: dict[str, float] = {}  # rank 0's metrics, after spawned workers finished

    # -- argument checks --------------------------------------------------------------------------

    @staticmethod
    def _check_loop_arguments(
        max_epochs: Any,
        max_steps: Any,
        accumulate: Any,
        clip_algorithm: Any,
        log_every: Any,
        sanity: Any,
        every_n_epoch: Any,
    ) -> None:
        def positive_int(name: str, value: Any, allow: tuple[Any, ...] = ()) -> None:
            if value in allow:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MisconfigurationError(
                    f"{name}={value!r} is not valid: give a positive int"
                    + (f" or one of {allow}" if allow else "")
                    + "."
                )

        positive_int("max_epochs", max_epochs, (None, -1))
        positive_int("max_steps", max_steps, (-1,))
        positive_int("accumulate_grad_batches", accumulate)
        positive_int("log_every_n_steps", log_every, (None,))
        positive_int("check_val_every_n_epoch", every_n_epoch, (None,))
        if sanity is not None and (isinstance(sanity, bool) or not isinstance(sanity, int) or sanity < -1):
            raise MisconfigurationError(f"num_sanity_val_steps={sanity!r}: give an int >= 0, or -1 for all batches.")
        if clip_algorithm not in (None, "norm", "value"):
            raise MisconfigurationError(f"gradient_clip_algorithm={clip_algorithm!r}: choose 'norm' or 'value'.")

    @staticmethod
    def _set_deterministic(deterministic: bool | str | None) -> None:
        if deterministic is None:
            return
        if deterministic not in (True, False, "warn"):
            raise MisconfigurationError(f"deterministic={deterministic!r}: choose True, False or 'warn'.")
        torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read by cuBLAS only if present

    def _build_callbacks(self, callbacks: Any, checkpointing: bool | None, progress_bar: bool | None) -> list[Callback]:
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint
        from torchplug.callbacks.progress import ProgressBar

        given = [callbacks] if isinstance(callbacks, Callback) else list(callbacks or [])
        for callback in given:
            if not isinstance(callback, Callback):
                raise MisconfigurationError(f"callbacks= holds {callback!r}, which is not a torchplug Callback.")
        if checkpointing is False and any(isinstance(c, ModelCheckpoint) for c in given):
            raise MisconfigurationError(
                "enable_checkpointing=False, but callbacks= holds a ModelCheckpoint. Remove one of them."
            )
        if progress_bar is False and any(isinstance(c, ProgressBar) for c in given):
            raise MisconfigurationError(
                "enable_progress_bar=False, but callbacks= holds a ProgressBar. Remove one of them."
            )
        if (
            checkpointing is not False
            and not self.fast_dev_run
            and not any(isinstance(c, ModelCheckpoint) for c in given)
        ):
            given.append(ModelCheckpoint())
        if progress_bar is not False and not any(isinstance(c, ProgressBar) for c in given):
            given.append(ProgressBar())
        return _ordered(given)

    def _build_loggers(self, logger: Any) -> list[Logger]:
        if logger is None or logger is True:
            from torchplug.loggers.csv_logs import CSVLogger

            return [CSVLogger(self.default_root_dir)]
        if logger is False:
            return []
        loggers = [logger] if isinstance(logger, Logger) else list(logger)
        for item in loggers:
            if not isinstance(item, Logger):
                raise MisconfigurationError(f"logger= holds {item!r}, which is not a torchplug Logger.")
        return loggers

    # -- what users read ----------------------------------------------------------------------------

    def describe(self) -> str:
        """How the hardware arguments were resolved: each choice and why (also ``core fit --resolve``)."""
        return self._resolution.describe()

    @property
    def accelerator(self) -> Any:
        """The Accelerator plugin in use."""
        return self.strategy.accelerator

    @property
    def precision_plugin(self) -> Any:
        """The Precision plugin in use."""
        return self.strategy.precision

    @property
    def checkpoint_io(self) -> Any:
        """The CheckpointIO plugin in use."""
        return self.strategy.checkpoint_io

    @property
    def cluster_environment(self) -> Any:
        """The ClusterEnvironment plugin in use."""
        return self.strategy.cluster_environment

    @property
    def num_devices(self) -> int:
        """Devices (processes) per node."""
        return self._resolution.num_devices

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

    @property
    def current_epoch(self) -> int:
        """The epoch in progress."""
        return self.fit_loop.progress.epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self.fit_loop.progress.global_step

    @property
    def logger(self) -> Logger | None:
        """The first logger, or None."""
        return self.loggers[0] if self.loggers else None

    @property
    def _loggers(self) -> list[Logger]:
        return self.loggers if self.is_global_zero else []

    @property
    def log_dir(self) -> str:
        """The first logger's run directory, else ``default_root_dir``."""
        logger = self.logger
        directory = logger.log_dir if logger is not None else None
        return directory or self.default_root_dir

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every logged metric (what ModelCheckpoint and EarlyStopping monitor)."""
        if self._results is not None:
            return self._results.callback_metrics()
        return {k: torch.tensor(v) for k, v in self._recovered_metrics.items()}

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``."""
        return self._results.progress_bar_metrics() if self._results is not None else {}

    @property
    def logged_metrics(self) -> dict[str, float]:
        """The last values sent to the loggers."""
        return dict(self._logged_metrics)

    @property
    def checkpoint_callback(self) -> Any:
        """The first ModelCheckpoint callback, or None."""
        from torchplug.callbacks.model_checkpoint import ModelCheckpoint

        return next((c for c in self.callbacks if isinstance(c, ModelCheckpoint)), None)

    @property
    def progress_bar_callback(self) -> Any:
        """The progress bar callback, or None."""
        from torchplug.callbacks.progress import ProgressBar

        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    @property
    def preempted(self) -> bool:
        """Whether the last fit stopped for a preemption (its checkpoint was written and the job requeued)."""
        return self._stop_now

    @property
    def sanity_checking(self) -> bool:
        """Whether the sanity-check validation is running."""
        return self.state.stage is RunningStage.SANITY_CHECKING

    @property
    def training(self) -> bool:
        """Whether training batches are running."""
        return self.state.stage is RunningStage.TRAINING

    @property
    def batches_per_optimizer_step(self) -> int:
        """Training batches per optimizer step: ``accumulate_grad_batches``, or 1 where the strategy accumulates itself.

        A strategy with ``handles_gradient_accumulation`` (the IPU's) accumulates inside its compiled
        step, on the device, so the loop steps the optimizer after every batch.
        """
        return 1 if self.strategy.handles_gradient_accumulation else self.accumulate_grad_batches

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the whole fit will take (for schedulers such as OneCycleLR)."""
        per_epoch = self.num_training_batches / self.batches_per_optimizer_step
        per_epoch = math.ceil(per_epoch) if not math.isinf(per_epoch) else per_epoch
        total = per_epoch * self.max_epochs if self.max_epochs not in (None, -1) else math.inf
        return min(total, self.max_steps) if self.max_steps != -1 else total

    @property
    def val_dataloaders(self) -> Any:
        """The validation dataloader(s) in use."""
        return self._val_loaders[0] if len(self._val_loaders) == 1 else self._val_loaders

    @property
    def train_dataloader(self) -> Any:
        """The training dataloader in use."""
        return self._train_loader

    # -- the four entry points ----------------------------------------------------------------------

    def fit(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: DataModule | None = None,
        ckpt_path: str | None = None,
    ) -> None:
        """Train ``model``, validating as configured.

        Args:
            model: The Module to train.
            train_dataloaders: A dataloader (or a DataModule); default: the DataModule's or the model's.
            val_dataloaders: Validation dataloader(s); default: the DataModule's or the model's.
            datamodule: Where the dataloaders come from.
            ckpt_path: Resume from this checkpoint: a path or URL, ``"last"`` or ``"best"``. When None,
                a cluster environment may supply one (a requeued SLURM job resumes by itself).
        """
        if isinstance(train_dataloaders, DataModule):
            datamodule, train_dataloaders = train_dataloaders, None
        self._run(
            TrainerFn.FITTING,
            model,
            datamodule,
            functools.partial(self._fit_impl, train_dataloaders, val_dataloaders, ckpt_path),
        )

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        datamodule: DataModule | None = None,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run one validation epoch and return its metrics, one dict per dataloader (``verbose``: print a table)."""
        return self._evaluate(  # type: ignore[no-any-return]
            TrainerFn.VALIDATING,
            model,
            dataloaders,
            ckpt_path,
            datamodule,
            verbose=verbose,
        )

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        datamodule: DataModule | None = None,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run the test set and return its metrics, one dict per dataloader (``verbose``: print a table)."""
        return self._evaluate(  # type: ignore[no-any-return]
            TrainerFn.TESTING,
            model,
            dataloaders,
            ckpt_path,
            datamodule,
            verbose=verbose,
        )

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool = True,
        ckpt_path: str | None = None,
    ) -> Any:
        """Run ``predict_step`` over the data; return the predictions (a list per dataloader when several)."""
        return self._evaluate(TrainerFn.PREDICTING, model, dataloaders, ckpt_path, datamodule, return_predictions)

    def _evaluate(
        self,
        fn: TrainerFn,
        model: Module | None,
        dataloaders: Any,
        ckpt_path: str | None,
        datamodule: DataModule | None,
        keep: bool = True,
        verbose: bool = False,
    ) -> Any:
        if isinstance(dataloaders, DataModule):
            datamodule, dataloaders = dataloaders, None
        model = model if model is not None else self.module
        if model is None:
            raise MisconfigurationError(f"trainer.{fn.value}() needs a model: trainer.{fn.value}(model, ...).")
        impl = functools.partial(self._evaluate_impl, fn, dataloaders, ckpt_path, keep, verbose)
        return self._run(fn, model, datamodule or self.datamodule, impl)

    # -- running ------------------------------------------------------------------------------------

    def _run(self, fn: TrainerFn, model: Module, datamodule: DataModule | None, impl: Callable[[], Any]) -> Any:
        if not isinstance(model, Module):
            raise MisconfigurationError(f"trainer.{fn.value}() needs a torchplug.Module, got {type(model).__name__}.")
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise MisconfigurationError(f"datamodule= must be a torchplug.DataModule, got {type(datamodule).__name__}.")
        self.state.fn, self.state.status = fn, TrainerStatus.RUNNING
        self.module, self.datamodule = model, datamodule
        model._trainer = self
        if datamodule is not None:
            datamodule.trainer = self
        self.should_stop = False
        self._stop_now = False
        launcher = self.strategy.launcher
        try:
            result = launcher.launch(impl, trainer=self) if launcher is not None else impl()
            self.state.status = TrainerStatus.INTERRUPTED if self._stop_now else TrainerStatus.FINISHED
            return result
        except BaseException as exc:
            self.state.status = TrainerStatus.INTERRUPTED
            self._on_exception(exc)
            raise
        finally:
            self.state.stage = None

    def _on_exception(self, exc: BaseException) -> None:
        for callback in self.callbacks:
            try:
                callback.on_exception(self, self.module, exc)
            except Exception as hook_error:  # the run's own error matters more
                rank_zero_warn(f"{type(callback).__name__}.on_exception raised {hook_error!r}")
        self.strategy.on_exception(exc)
        for logger in self._loggers:
            logger.finalize("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")

    def _setup(self, stage: str) -> None:
        strategy = self.strategy
        strategy.connect(self.module)
        strategy.setup_environment()
        rank_zero_only.rank = strategy.global_rank
        self._results = MetricStore(strategy.reduce)
        self._hook_cache.clear()
        if self.datamodule is not None:
            if strategy.local_rank == 0:
                self.datamodule.prepare_data()
            strategy.barrier("prepare_data")
            self.datamodule.setup(stage)
        self._broadcast_log_dir()
        self._call_hooks("setup", stage, module_hook=lambda: self.module.setup(stage))

    def _broadcast_log_dir(self) -> None:
        # Only rank 0 knows the next free version directory; every rank must agree on it.
        for logger in self.loggers:
            if hasattr(type(logger), "version") and getattr(type(logger).version, "fset", None) is not None:
                agreed = self.strategy.broadcast(logger.version if self.is_global_zero else None)
                logger.version = agreed  # type: ignore[misc,assignment]

    def _teardown(self, stage: str) -> None:
        self._call_hooks("teardown", stage, module_hook=lambda: self.module.teardown(stage))
        if self.datamodule is not None:
            self.datamodule.teardown(stage)
        self.strategy.checkpoint_io.flush()
        self.strategy.teardown()

    def _fit_impl(self, train_dataloaders: Any, val_dataloaders: Any, ckpt_path: str | None) -> None:
        self._setup("fit")
        try:
            self._prepare_train_data(train_dataloaders, val_dataloaders)
            self.strategy.setup(self._configure_optimizers)
            path = self.ckpt_path = checkpointing.resolve_ckpt_path(self, ckpt_path, "fit") or self._auto_resume_path()
            if path is not None:
                checkpoint = self.strategy.load_checkpoint(path)
                checkpointing.restore_model(self, checkpoint)
                checkpointing.restore_training_state(self, checkpoint)
            self._log_hyperparams()
            self._watch_preemption = bool(self.cluster_environment and self.cluster_environment.setup_preemption())
            self._call_hooks("on_fit_start")
            self._sanity_check()
            self.fit_loop.run()
            self._call_hooks("on_fit_end")
            for logger in self._loggers:
                logger.finalize("success")
        finally:
            try:
                self._teardown("fit")  # flushes checkpoint writes before a held-back SIGTERM may be re-sent
            finally:
                if self._watch_preemption:
                    self.cluster_environment.teardown_preemption()

    def _evaluate_impl(self, fn: TrainerFn, dataloaders: Any, ckpt_path: str | None, keep: bool, verbose: bool) -> Any:
        stage = fn.value
        self._setup(stage)
        try:
            loaders, limits = self._prepare_eval_data(fn, dataloaders)
            if fn is TrainerFn.VALIDATING:
                self.num_val_batches = limits
            elif fn is TrainerFn.TESTING:
                self.num_test_batches = limits
            else:
                self.num_predict_batches = limits
            self.strategy.setup(None)
            path = self.ckpt_path = checkpointing.resolve_ckpt_path(self, ckpt_path, stage)
            if path is not None:
                checkpointing.restore_model(self, self.strategy.load_checkpoint(path))
            if fn is TrainerFn.PREDICTING:
                predictions = run_prediction(self, loaders, limits, keep)
                return (predictions[0] if len(predictions) == 1 else predictions) if keep else None
            running = RunningStage.VALIDATING if fn is TrainerFn.VALIDATING else RunningStage.TESTING
            results = run_evaluation(self, running, loaders, limits)
            for logger in self._loggers:
                logger.save()
            if verbose and self.is_global_zero:
                print_results(results, stage)
            return results
        finally:
            self._teardown(stage)

    # -- data ---------------------------------------------------------------------------------------

    def _source(self, hook: str) -> Any:
        for owner in (self.datamodule, self.module):
            if owner is not None and callable(getattr(owner, hook, None)):
                try:
                    return getattr(owner, hook)()
                except NotImplementedError:
                    continue
        return None

    def _process(self, loader: Any, what: str, shuffle_default: bool) -> Any:
        check_iterable(loader, what)
        if self.use_distributed_sampler:
            loader = with_distributed_sampler(loader, self.strategy.distributed_sampler_kwargs, shuffle_default)
        return self.strategy.process_dataloader(loader)

    def _prepare_train_data(self, train: Any, val: Any) -> None:
        train = train if train is not None else self._source("train_dataloader")
        if train is None:
            raise MisconfigurationError(
                "fit() needs training data: pass train_dataloaders=..., a DataModule with "
                "train_dataloader(), or define train_dataloader() on the model."
            )
        self._train_loader = self._process(train, "train_dataloaders", True)
        available = num_batches(self._train_loader)
        self.num_training_batches = limit_batches(available, self.limit_train_batches, "limit_train_batches")
        val_loaders = as_list(val if val is not None else self._source("val_dataloader"))
        self._val_loaders = [self._process(v, "val_dataloaders", False) for v in val_loaders]
        self.num_val_batches = [
            limit_batches(num_batches(v), self.limit_val_batches, "limit_val_batches") for v in self._val_loaders
        ]
        self._val_check_batch = self._compute_val_check_batch()

    def _compute_val_check_batch(self) -> int | None:
        interval = self.val_check_interval
        if isinstance(interval, float):
            if not 0.0 < interval <= 1.0:
                raise MisconfigurationError(
                    f"val_check_interval={interval!r}: a float is a fraction of an epoch, in (0.0, 1.0]."
                )
            if interval == 1.0:
                return None
            if math.isinf(self.num_training_batches):
                raise MisconfigurationError(
                    f"val_check_interval={interval!r} needs a training dataloader with a "
                    "length. Hint: give an int number of batches instead."
                )
            return max(1, int(self.num_training_batches * interval))
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise MisconfigurationError(f"val_check_interval={interval!r}: give a float fraction or a positive int.")
        if self.check_val_every_n_epoch is not None and interval > self.num_training_batches:
            raise MisconfigurationError(
                f"val_check_interval={interval} is more than the {self.num_training_batches} training batches of an "
                "epoch. Hint: lower it, or pass check_val_every_n_epoch=None to count batches across epochs."
            )
        return interval

    def _prepare_eval_data(self, fn: TrainerFn, dataloaders: Any) -> tuple[list[Any], list[float]]:
        prefix = {"validate": "val", "test": "test", "predict": "predict"}[fn.value]
        given = dataloaders if dataloaders is not None else self._source(f"{prefix}_dataloader")
        loaders = [self._process(d, "dataloaders", False) for d in as_list(given)]
        if not loaders:
            raise MisconfigurationError(
                f"trainer.{fn.value}() found no data: pass dataloaders=..., or define "
                f"{prefix}_dataloader() on the DataModule or the model."
            )
        limit = {
            "validate": self.limit_val_batches,
            "test": self.limit_test_batches,
            "predict": self.limit_predict_batches,
        }[fn.value]
        limits = [limit_batches(num_batches(d), limit, f"limit_{prefix}_batches") for d in loaders]
        return loaders, limits

    # -- optimizers and schedulers ------------------------------------------------------------------

    def _configure_optimizers(self) -> list[torch.optim.Optimizer]:
        self.optimizers, self.lr_scheduler_configs = parse_optimizers(self.module.configure_optimizers())
        if self.module.automatic_optimization and len(self.optimizers) > 1:
            raise MisconfigurationError(
                f"configure_optimizers() returned {len(self.optimizers)} optimizers; automatic optimization steps "
                "one. Hint: set self.automatic_optimization = False and step them in training_step."
            )
        self._step_schedulers = self.module.automatic_optimization and any(
            c.interval == "step" for c in self.lr_scheduler_configs
        )
        return self.optimizers

    def _manual_optimizers(self) -> list[Any]:
        from torchplug.trainer.manual import ManualOptimizer

        return [ManualOptimizer(optimizer, self) for optimizer in self.optimizers]

    def _update_schedulers(self, interval: str) -> None:
        if not self.module.automatic_optimization:
            return
        count = self.global_step if interval == "step" else self.current_epoch + 1
        for config in self.lr_scheduler_configs:
            if config.interval != interval or count % config.frequency:
                continue
            if config.reduce_on_plateau:
                value = self.callback_metrics.get(config.monitor or "")
                if value is None:
                    if config.strict:
                        raise MisconfigurationError(
                            f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged. Logged: "
                            f"{', '.join(sorted(self.callback_metrics)) or '(none)'}. Hint: self.log it, or set "
                            "'strict': False in the lr_scheduler dict."
                        )
                    rank_zero_warn(f"ReduceLROnPlateau skipped: {config.monitor!r} was not logged.")
                    continue
                config.scheduler.step(value)
            else:
                config.scheduler.step()

    # -- validation inside fit ----------------------------------------------------------------------

    def _should_validate(self, batches_done: int, is_last: bool) -> bool:
        if not self._val_loaders or not any(self.num_val_batches):
            return False
        every = self.check_val_every_n_epoch
        if every is not None and (self.current_epoch + 1) % every:
            return False
        check = self._val_check_batch
        if check is None:
            return is_last
        count = batches_done if every is not None else self.fit_loop.progress.total_batches
        return count % check == 0

    def _run_validation(self) -> None:
        run_evaluation(
            self,
            RunningStage.VALIDATING,
            self._val_loaders,
            self.num_val_batches,
            after_batches=self.fit_loop.mark_validated,
        )
        self.state.stage = RunningStage.TRAINING
        self._results.set_stage("train", reset=False)

    def _sanity_check(self) -> None:
        steps = self.num_sanity_val_steps
        if not steps or not self._val_loaders or self.fit_loop.progress.global_step:
            return
        limits = [n if steps == -1 else min(steps, n) for n in self.num_val_batches]
        self._call_hooks("on_sanity_check_start")
        run_evaluation(self, RunningStage.SANITY_CHECKING, self._val_loaders, limits)
        self._results.drop_stage("sanity_check")
        self._call_hooks("on_sanity_check_end")
        self.state.stage = None

    # -- hooks --------------------------------------------------------------------------------------

    def _hook_list(
        self, name: str, module_hooks: Sequence[Callable[..., Any]] = (), monitoring: bool | None = None
    ) -> list[Callable[..., Any]]:
        """The callables to run for hook ``name``, bound: overriding callbacks, then overriding module hooks.

        ``monitoring`` selects only (True) or no (False) metric-monitoring callbacks; None selects all.
        """
        key = (name, monitoring)
        hooks = self._hook_cache.get(key)
        if hooks is None:
            hooks = [
                functools.partial(getattr(c, name), self, self.module)
                for c in self.callbacks
                if _overrides(c, name, Callback)
                and (monitoring is None or getattr(c, "monitors_metrics", False) == monitoring)
            ]
            self._hook_cache[key] = hooks
        overriding = [h for h in module_hooks if _overrides(self.module, h.__name__, Module)]
        extra = overriding if monitoring is not True else []
        return hooks + extra if extra else hooks

    def _call_hooks(
        self, name: str, *args: Any, monitoring: bool | None = None, module_hook: Callable[[], Any] | None = None
    ) -> None:
        """Run hook ``name`` on the callbacks, then on the module (which runs with the non-monitoring group)."""
        for hook in self._hook_list(name, monitoring=monitoring):
            hook(*args)
        if monitoring is not True:
            if module_hook is not None:
                module_hook()
            elif _overrides(self.module, name, Module):
                getattr(self.module, name)(*args)

    # -- logging ------------------------------------------------------------------------------------

    def _log_metrics(self, metrics: dict[str, float]) -> None:
        if not metrics:
            return
        self._logged_metrics.update(metrics)
        metrics = {**metrics, "epoch": float(self.current_epoch)}
        for logger in self._loggers:
            logger.log_metrics(metrics, self.global_step)

    def _log_step_metrics(self) -> None:
        self._log_metrics(self._results.take_step_metrics())

    def _log_epoch_metrics(self, stage: str) -> None:
        self._log_metrics({**self._results.take_step_metrics(), **self._results.epoch_metrics(stage)})

    def _log_hyperparams(self) -> None:
        params = {**dict(self.module.hparams)}
        if self.datamodule is not None:
            params.update(self.datamodule.hparams)
        if params and getattr(self.module, "_log_hyperparams", True):
            for logger in self._loggers:
                logger.log_hyperparams(params)

    # -- checkpoints and preemption -----------------------------------------------------------------

    def save_checkpoint(
        self, filepath: str | os.PathLike[str], weights_only: bool = False, storage_options: Any = None
    ) -> None:
        """Write a checkpoint of the run now. Call it on every process: rank 0 writes, sharded state is gathered."""
        if self.module is None:
            raise MisconfigurationError("save_checkpoint() needs a model: call it during or after fit().")
        checkpoint = checkpointing.dump_checkpoint(self, weights_only)
        self.strategy.save_checkpoint(checkpoint, os.fspath(filepath), storage_options=storage_options)
        self.strategy.barrier("save_checkpoint")

    def _auto_resume_path(self) -> str | None:
        environment = self.cluster_environment
        if environment is None:
            return None
        path: str | None = environment.resume_checkpoint_path(self.default_root_dir, self.strategy.checkpoint_io)
        return path

    def _preemption_requested(self) -> bool:
        requested = bool(self.cluster_environment.preemption_requested())
        return self.strategy.reduce_boolean_decision(requested, all=False) if self.world_size > 1 else requested

    def _handle_preemption(self) -> None:
        environment = self.cluster_environment
        path = environment.preemption_checkpoint_path(self.default_root_dir)
        self.save_checkpoint(path)
        self.strategy.checkpoint_io.flush()
        self.strategy.barrier("preemption")
        if self.is_global_zero:
            environment.requeue()
        rank_zero_warn(
            f"Preempted at step {self.global_step}: checkpoint written to {path} and a requeue requested "
            f"from {type(environment).__name__}; fit() returns now and a restarted job resumes from it."
        )
        self._stop_now = True
        self.should_stop = True


def _ordered(callbacks: list[Callback]) -> list[Callback]:
    """Metric-monitoring callbacks (checkpointing, early stopping) run after the others; checkpoints last."""
    from torchplug.callbacks.model_checkpoint import ModelCheckpoint

    others = [c for c in callbacks if not getattr(c, "monitors_metrics", False)]
    monitors = [c for c in callbacks if getattr(c, "monitors_metrics", False) and not isinstance(c, ModelCheckpoint)]
    checkpoints = [c for c in callbacks if isinstance(c, ModelCheckpoint)]
    return others + monitors + checkpoints
