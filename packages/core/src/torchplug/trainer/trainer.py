"""``torchplug.Trainer``: fit, validate, test and predict, on any hardware a plugin provides.

The Trainer validates and stores its arguments, then hands the work to small parts, each in its
own module: the connector resolves the hardware arguments into one Strategy; the hook runner,
the logger, data and checkpoint connectors and the preemption watch are handed to the loops,
which use nothing else of the Trainer but its public API.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug._host import PluginHost  # at run time: Trainer's signature shows real types
from torchplug.callbacks.callback import Callback
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.loggers.logger import Logger
from torchplug.loops.evaluation import EvaluationLoop, PredictionLoop
from torchplug.loops.fit import FitLoop
from torchplug.loops.state import LoopConfig, RunState
from torchplug.profilers.profiler import Profiler, build_profiler
from torchplug.trainer import arguments as check
from torchplug.trainer.callback_connector import add_feature_callbacks, build_callbacks
from torchplug.trainer.checkpoint_connector import CheckpointConnector
from torchplug.trainer.connector import (
    AcceleratorArg,
    DevicesArg,
    PluginsArg,
    PrecisionArg,
    StrategyArg,
    resolve,
)
from torchplug.trainer.data import DataConnector, data_sources
from torchplug.trainer.hooks import HookRunner
from torchplug.trainer.logger_choice import LoggerArg, build_loggers
from torchplug.trainer.logger_connector import LoggerConnector
from torchplug.trainer.preemption import PreemptionWatch
from torchplug.trainer.properties import TrainerProperties
from torchplug.trainer.run import Runner
from torchplug.trainer.signals import SignalStop
from torchplug.trainer.states import RunningStage, TrainerFn
from torchplug.utilities.annotations import RealSignature
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_only

if TYPE_CHECKING:
    from torchplug.callbacks.prediction_writer import BasePredictionWriter
    from torchplug.strategies.strategy import Strategy

__all__ = ["Trainer"]


class Trainer(TrainerProperties):
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
        logger: True or None (the default logger under ``default_root_dir``: TensorBoard when tensorboard
            is installed, else CSV), False (none), a registry name (``"csv"``, ``"tensorboard"``,
            ``"mlflow"``...: ``core plugins list --kind logger``), a Logger, or a list of names and Loggers.
        callbacks: Callbacks to add to the defaults (checkpointing and the progress bar).
        fast_dev_run: Run 1 (or n) batches of everything, without logging or checkpoints, to find bugs fast.
        max_epochs: Stop after this many epochs (default 1000 when neither it nor ``max_steps`` is set;
            -1 for no limit; 0 trains nothing: ``fit`` sets up, may run the sanity check, and ends).
        min_epochs: Do not stop early (EarlyStopping) before this many epochs.
        max_steps: Stop after this many optimizer steps (-1: no limit).
        min_steps: Do not stop early before this many steps.
        limit_train_batches: Batches per epoch: an int, or a float fraction (the same for the others).
        limit_val_batches: Validation batches per run.
        limit_test_batches: Test batches.
        limit_predict_batches: Predict batches.
        val_check_interval: Validate every this fraction of an epoch (float), this many batches (int),
            or this much time (``"DD:HH:MM:SS"``, ``{"minutes": 30}``, a ``timedelta``: after the first
            batch that ends that long after training started or after the last validation).
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
        nonfinite_loss: What a NaN or infinite training loss does: ``"raise"`` (default) stops ``fit``
            with a :class:`~torchplug.NonFiniteLossError` naming the step (the loss is checked every
            ``log_every_n_steps`` batches and at each epoch end, nothing in between); ``"skip"`` checks
            every batch and skips the optimizer step of such a batch with a warning (one sync per
            batch); ``"ignore"`` does not check.
        default_root_dir: Where logs and checkpoints go by default (the current directory).
        max_time: Stop training after this long: ``"DD:HH:MM:SS"``, a dict (``{"hours": 12}``) or a
            ``timedelta`` (checked after every batch; see :class:`torchplug.callbacks.Timer`).
        overfit_batches: Train and validate on this many batches (an int) or fraction (a float) of the
            same data every epoch, unshuffled: a model that cannot overfit them has a bug.
        enable_model_summary: Print the model summary when fitting starts (default True; a
            ``ModelSummary`` callback).
        benchmark: Let the accelerator tune its kernels for the input sizes it sees (cuDNN's benchmark
            on CUDA); None leaves the accelerator's setting alone (False with ``deterministic=True``).
        profiler: Time the run's hooks, batches and epochs and report at the end: ``"simple"``,
            ``"advanced"`` (cProfile), ``"pytorch"`` (torch.profiler) or a ``torchplug.profilers.Profiler``.
        detect_anomaly: Run fit under ``torch.autograd.detect_anomaly`` (find the op that made a NaN).
        barebones: Turn off everything that costs speed (logging, checkpointing, the progress bar, the
            model summary, the sanity check); asking for one of them too is an error.
        sync_batchnorm: Turn BatchNorm layers into SyncBatchNorm, whose statistics span all processes.
        reload_dataloaders_every_n_epochs: Ask the DataModule (or module) for new dataloaders every n
            epochs (0: never).
        enable_autolog_hparams: Send the saved hyperparameters to the loggers when fitting starts.
        model_registry: Not supported (it needs Lightning's cloud model registry); only None is accepted.
        plugin_host: The plugins to resolve names from (default: this process's, see ``core plugins list``).
    """

    __signature__ = RealSignature()  # inspect.signature(Trainer) shows real types (utilities/annotations.py)

    def __init__(
        self,
        *,
        accelerator: AcceleratorArg = "auto",
        strategy: StrategyArg = "auto",
        devices: DevicesArg = "auto",
        num_nodes: int = 1,
        precision: PrecisionArg = None,
        plugins: PluginsArg = None,
        logger: LoggerArg = None,
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
        val_check_interval: int | float | str | timedelta | dict[str, int] | None = None,
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
        nonfinite_loss: str = "raise",
        default_root_dir: str | os.PathLike[str] | None = None,
        max_time: str | timedelta | dict[str, int] | None = None,
        overfit_batches: int | float = 0.0,
        enable_model_summary: bool | None = None,
        benchmark: bool | None = None,
        profiler: Any = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
        plugin_host: PluginHost | None = None,
    ) -> None:
        barebones = check.check_bool("barebones", barebones)
        if barebones:
            check.check_barebones(locals())
            logger, enable_checkpointing, enable_progress_bar, enable_model_summary = False, False, False, False
            num_sanity_val_steps = 0
        if model_registry is not None:
            raise MisconfigurationError(
                f"model_registry={model_registry!r} is not supported: it uploads to Lightning's cloud model registry "
                "(litmodels), which torchplug does not provide. Hint: save checkpoints with ModelCheckpoint and upload "
                "them yourself."
            )
        overfit = check.check_limit("overfit_batches", overfit_batches) or 0
        if overfit:  # the same batches for training and validation, every epoch (the loaders are made sequential)
            limit_train_batches = limit_val_batches = overfit
        dev = check.check_fast_dev_run(fast_dev_run)
        steps = check.check_int("max_steps", max_steps, 1, (-1,))
        epochs = check.check_int("max_epochs", max_epochs, 0, (None, -1))
        min_epochs = check.check_int("min_epochs", min_epochs, 0, (None,))
        min_steps = check.check_int("min_steps", min_steps, 0, (None,))
        check.warn_if_minimum_above_maximum("epochs", min_epochs, epochs)
        check.warn_if_minimum_above_maximum("steps", min_steps, steps)
        train, val, test, predict = (
            check.check_limit(f"limit_{stage}_batches", value)
            for stage, value in zip(("train", "val", "test", "predict"), (
                limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches))
        )  # fmt: skip
        interval = check.check_val_check_interval(val_check_interval)
        check.announce_batch_limits(
            dev,
            overfit,
            limit_train_batches=train,
            limit_val_batches=val,
            limit_test_batches=test,
            limit_predict_batches=predict,
            val_check_interval=val_check_interval,
        )
        every_n = check.check_int("check_val_every_n_epoch", check_val_every_n_epoch, 1, (None,))
        sanity = check.check_int(
            "num_sanity_val_steps", num_sanity_val_steps, 0, (None, -1), "give an int >= 0, or -1 for all batches"
        )
        clip_val = check.check_clip_val(gradient_clip_val)
        self._run = RunState(
            LoopConfig(
                max_epochs=1 if dev else (epochs if epochs is not None or steps != -1 else 1000),
                max_steps=dev or steps,
                min_epochs=min_epochs,
                min_steps=min_steps,
                limit_train_batches=dev or train,
                limit_val_batches=dev or val,
                limit_test_batches=dev or test,
                limit_predict_batches=dev or predict,
                val_check_interval=1.0 if dev else interval,
                check_val_every_n_epoch=1 if dev else every_n,
                num_sanity_val_steps=0 if dev else (2 if sanity is None else sanity),
                log_every_n_steps=check.check_int("log_every_n_steps", log_every_n_steps, 1, (None,)) or 50,
                accumulate_grad_batches=check.check_int("accumulate_grad_batches", accumulate_grad_batches, 1),
                gradient_clip_val=clip_val,
                gradient_clip_algorithm=check.check_clip_algorithm(gradient_clip_algorithm, clip_val),
                inference_mode=check.check_bool("inference_mode", inference_mode),
                use_distributed_sampler=check.check_bool("use_distributed_sampler", use_distributed_sampler),
                deterministic=check.check_bool("deterministic", deterministic, (None, "warn")),
                benchmark=check.check_bool("benchmark", benchmark, (None,)),
                nonfinite_loss=check.check_nonfinite_loss(nonfinite_loss),
                reload_dataloaders_every_n_epochs=check.check_int(
                    "reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs, 0
                ),
                detect_anomaly=check.check_bool("detect_anomaly", detect_anomaly),
                sync_batchnorm=check.check_bool("sync_batchnorm", sync_batchnorm),
                enable_autolog_hparams=check.check_bool("enable_autolog_hparams", enable_autolog_hparams),
                barebones=barebones,
                fast_dev_run=dev,
                overfit_batches=overfit,
                default_root_dir=check.check_root_dir(default_root_dir),
            )
        )
        check.check_bool("enable_checkpointing", enable_checkpointing, (None,))
        check.check_bool("enable_progress_bar", enable_progress_bar, (None,))
        enable_model_summary = check.check_bool("enable_model_summary", enable_model_summary, (None,))
        self.profiler: Profiler = build_profiler(profiler)
        self._resolution = resolve(
            accelerator=accelerator,
            devices=devices,
            strategy=strategy,
            precision=precision,
            plugins=plugins,
            num_nodes=num_nodes,
            host=plugin_host,
        )
        self.strategy: Strategy = self._resolution.strategy
        if rank_zero_only.is_zero():  # the line asks torch about unused devices: only where it is shown
            rank_zero_info(self._resolution.summary())
        self.callbacks = build_callbacks(callbacks, enable_checkpointing, enable_progress_bar, dev, barebones)
        self.callbacks = add_feature_callbacks(self.callbacks, enable_model_summary, max_time, barebones)
        self.loggers: list[Logger] = build_loggers(logger, self.default_root_dir, plugin_host, fast_dev_run=bool(dev))
        self._hooks = HookRunner(self)
        self._logging = LoggerConnector(self)
        self._data = DataConnector(self)
        self._checkpoints = CheckpointConnector(self)
        self._preemption = PreemptionWatch(self)
        self._signals = SignalStop(self)
        run, strategy, hooks, logging = self._run, self.strategy, self._hooks, self._logging
        self.fit_loop = FitLoop(
            run,
            strategy=strategy,
            hooks=hooks,
            logging=logging,
            data=self._data,
            preemption=self._preemption,
            profiler=self.profiler,
            signals=self._signals,
            ckpt_path=self._resumed_from,  # a bound method: ddp_spawn pickles the Trainer
        )
        stepped = self._stepped_batches
        self.validate_loop = EvaluationLoop(
            run, strategy=strategy, hooks=hooks, logging=logging, stage=RunningStage.VALIDATING, logger_step=stepped
        )
        self.test_loop = EvaluationLoop(
            run, strategy=strategy, hooks=hooks, logging=logging, stage=RunningStage.TESTING, logger_step=stepped
        )
        self.predict_loop = PredictionLoop(run, strategy=strategy, hooks=hooks, writers=self._prediction_writers)
        self._runner = Runner(
            self,
            hooks=hooks,
            logging=logging,
            data=self._data,
            checkpoints=self._checkpoints,
            preemption=self._preemption,
            signals=self._signals,
        )

    def _prediction_writers(self) -> list[BasePredictionWriter]:
        from torchplug.callbacks.prediction_writer import BasePredictionWriter  # only a predict() needs it

        return [c for c in self.callbacks if isinstance(c, BasePredictionWriter)]

    def _resumed_from(self) -> str | None:
        return self._checkpoints.ckpt_path

    def _stepped_batches(self) -> int:
        return self.fit_loop.progress.stepped_batches

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
        train_dataloaders, datamodule = data_sources("fit", "train_dataloaders", train_dataloaders, datamodule)
        data_sources("fit", "val_dataloaders", val_dataloaders, datamodule)
        runner = self._runner
        runner.run(
            TrainerFn.FITTING,
            model,
            datamodule,
            functools.partial(runner.fit, train_dataloaders, val_dataloaders, ckpt_path),
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
        result: list[dict[str, float]] = self._evaluate(
            TrainerFn.VALIDATING, model, dataloaders, ckpt_path, datamodule, verbose=verbose
        )
        return result

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        datamodule: DataModule | None = None,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run the test set and return its metrics, one dict per dataloader (``verbose``: print a table)."""
        result: list[dict[str, float]] = self._evaluate(
            TrainerFn.TESTING, model, dataloaders, ckpt_path, datamodule, verbose=verbose
        )
        return result

    def predict(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | None = None,
    ) -> Any:
        """Run ``predict_step`` over the data; return the predictions (a list per dataloader when several).

        ``return_predictions``: True or None (the default, as in Lightning) returns them; False
        keeps none (for a :class:`~torchplug.callbacks.BasePredictionWriter` that writes them).
        """
        keep = check.check_bool("return_predictions", return_predictions, (None,)) is not False
        return self._evaluate(
            TrainerFn.PREDICTING,
            model=model,
            dataloaders=dataloaders,
            ckpt_path=ckpt_path,
            datamodule=datamodule,
            keep=keep,
        )

    def save_checkpoint(
        self, filepath: str | os.PathLike[str], weights_only: bool = False, storage_options: Any = None
    ) -> None:
        """Write a checkpoint of the run now. Call it on every process: rank 0 writes, sharded state is gathered."""
        if self.module is None:
            raise MisconfigurationError("save_checkpoint() needs a model: call it during or after fit().")
        self._checkpoints.save(os.fspath(filepath), weights_only, storage_options)

    def restore_checkpoint(self, filepath: str | os.PathLike[str]) -> None:
        """Put the running fit back to a checkpoint that :meth:`save_checkpoint` wrote during it.

        Restores the model's weights, the optimizers and schedulers, the loop's position, every
        callback's state and the random state, as ``fit(ckpt_path=...)`` would. Call it on every
        process, from inside ``fit`` once the optimizers exist (a callback's ``on_fit_start`` or
        later): the tuner's finders use it to undo their trial runs.

        Raises:
            MisconfigurationError: When no fit is running with its optimizers set up.
        """
        if self.state.fn is not TrainerFn.FITTING or not self.optimizers:
            raise MisconfigurationError(
                "restore_checkpoint() works inside a running fit, once the optimizers exist (for example in a "
                "callback's on_fit_start). Hint: to start a fit from a checkpoint, use fit(model, ckpt_path=...)."
            )
        checkpoint = self.strategy.load_checkpoint(os.fspath(filepath))
        self._checkpoints.restore_model(checkpoint)
        self._checkpoints.restore_training_state(checkpoint)
        self.strategy.barrier("restore_checkpoint")  # every rank has read the file: it may be removed now

    # -- running ------------------------------------------------------------------------------------

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
        dataloaders, datamodule = data_sources(fn.value, "dataloaders", dataloaders, datamodule)
        runner = self._runner
        if model is None and ckpt_path is None and self.module is not None:
            ckpt_path = runner.default_weights(fn)
        model = model if model is not None else self.module
        if model is None:
            raise MisconfigurationError(f"trainer.{fn.value}() needs a model: trainer.{fn.value}(model, ...).")
        impl = functools.partial(
            runner.evaluate, fn, dataloaders=dataloaders, ckpt_path=ckpt_path, keep=keep, verbose=verbose
        )
        return runner.run(fn, model, datamodule or self.datamodule, impl)
