"""How the Trainer runs ``fit``, ``validate``, ``test`` and ``predict``: set up, run the loops, tear down.

:class:`Runner` is the part of the Trainer that drives one call: it checks the model and hooks,
launches the processes through the strategy's launcher, sets up the strategy, data, loggers and
checkpoint restore, runs the loop, and tears everything down whatever happens, running the
``on_exception`` hooks once (before the teardown, while the process group is still up) and turning
a signal's stop into the exit status the signal asks for.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError, TrainingInterrupted
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.trainer.callback_connector import attach_model_callbacks
from torchplug.trainer.configuration import (
    BAREBONES_RESULTS,
    apply_benchmark,
    apply_deterministic,
    convert_sync_batchnorm,
    verify_loop_configuration,
)
from torchplug.trainer.hook_checks import announce_differences, verify_datamodule_hooks, verify_hooks
from torchplug.trainer.hooks import is_overridden
from torchplug.trainer.optimizers import configure_optimizers
from torchplug.trainer.states import ExitRun, TrainerFn, TrainerStatus
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
from torchplug.utilities.shutdown import exit_code, note_failure_time
from torchplug.utilities.table import print_results

if TYPE_CHECKING:
    from torchplug.trainer.checkpoint_connector import CheckpointConnector
    from torchplug.trainer.data import DataConnector
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector
    from torchplug.trainer.preemption import PreemptionWatch
    from torchplug.trainer.signals import SignalStop
    from torchplug.trainer.trainer import Trainer

__all__ = ["Runner"]


class Runner:
    """Runs one ``fit``/``validate``/``test``/``predict`` call of ``trainer`` from start to teardown.

    Args:
        trainer: The Trainer whose public surface (strategy, loops, callbacks) it drives.
        hooks: Runs the callbacks' and the module's hooks.
        logging: The run's metrics and loggers.
        data: The run's dataloaders.
        checkpoints: Checkpoint dump and restore.
        preemption: The cluster's preemption notice, watched during ``fit``.
        signals: SIGINT/SIGTERM handling during ``fit``.
    """

    def __init__(
        self,
        trainer: Trainer,
        *,
        hooks: HookRunner,
        logging: LoggerConnector,
        data: DataConnector,
        checkpoints: CheckpointConnector,
        preemption: PreemptionWatch,
        signals: SignalStop,
    ) -> None:
        self.trainer = trainer
        self._hooks = hooks
        self._logging = logging
        self._data = data
        self._checkpoints = checkpoints
        self._preemption = preemption
        self._signals = signals
        self.handled_exception: BaseException | None = None  # the failure whose on_exception hooks already ran

    def run(self, fn: TrainerFn, model: Module, datamodule: DataModule | None, impl: Callable[[], Any]) -> Any:
        """Check ``model`` and its hooks, attach it, and run ``impl`` through the strategy's launcher.

        Raises:
            MisconfigurationError: ``model`` is not a Module, or a hook cannot be honoured.
            SystemExit: A SIGINT/SIGTERM stopped the run (status 130/143) once every process wound down.
        """
        trainer = self.trainer
        model = _unwrap_compiled(model)
        if not isinstance(model, Module):
            raise MisconfigurationError(f"trainer.{fn.value}() needs a torchplug.Module, got {type(model).__name__}.")
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise MisconfigurationError(f"datamodule= must be a torchplug.DataModule, got {type(datamodule).__name__}.")
        verify_loop_configuration(model, fn)
        if datamodule is not None:
            verify_datamodule_hooks(datamodule)
        trainer.state.fn, trainer.state.status = fn, TrainerStatus.RUNNING
        trainer.module, trainer.datamodule = model, datamodule
        model.trainer = trainer  # its Module children too, as in Lightning
        if datamodule is not None:
            datamodule.trainer = trainer
        trainer.callbacks = attach_model_callbacks(trainer.callbacks, model)
        verify_hooks(
            model,
            trainer.callbacks,
            trainer.strategy,
            {
                "accumulate_grad_batches": trainer.accumulate_grad_batches,
                "gradient_clip_val": trainer.gradient_clip_val,
            },
            fitting=fn is TrainerFn.FITTING,
        )
        if fn is TrainerFn.FITTING:
            announce_differences(model, trainer.callbacks, trainer.strategy)
        self._hooks.reset()
        trainer.should_stop = False
        launcher = trainer.strategy.launcher
        self.handled_exception = None
        try:
            if trainer.barebones:
                rank_zero_info(
                    "Trainer(barebones=True) started running: no progress bar, logs, checkpoints or summary."
                )
            result = launcher.launch(impl, trainer=trainer) if launcher is not None else impl()
            trainer.state.status = TrainerStatus.INTERRUPTED if trainer.preempted else TrainerStatus.FINISHED
        except BaseException as exc:
            trainer.state.status = TrainerStatus.INTERRUPTED
            handled = _caused_by(exc, self.handled_exception) or (
                isinstance(exc, TrainingInterrupted) and exc.handled  # the launcher's workers ran the hooks
            )
            if not handled:  # a failure outside the run itself (the launcher's)
                self.on_exception(exc)
            if isinstance(exc, TrainingInterrupted):  # every process wound down: exit as the signal asked
                raise SystemExit(exit_code(exc.signum)) from exc
            raise
        finally:
            trainer.state.stage = None
        signum, self._signals.signum = self._signals.signum, None
        if signum is not None:  # the signal came after the last step: the run is complete, and now it exits
            raise SystemExit(exit_code(signum))
        return result

    def on_exception(self, exc: BaseException) -> None:
        """Run the ``on_exception`` hooks (callbacks, DataModule, strategy) and finalize the loggers as failed."""
        trainer = self.trainer
        self.handled_exception = exc
        note_failure_time(exc)  # before the hooks, which may wait on the other processes
        for callback in trainer.callbacks:
            try:
                callback.on_exception(trainer, trainer.module, exc)
            except Exception as hook_error:  # the run's own error matters more; the hook's is reported
                rank_zero_warn(f"{type(callback).__name__}.on_exception raised {hook_error!r}")
        if trainer.datamodule is not None:
            try:
                trainer.datamodule.on_exception(exc)
            except Exception as hook_error:
                rank_zero_warn(f"{type(trainer.datamodule).__name__}.on_exception raised {hook_error!r}")
        trainer.strategy.on_exception(exc)
        self._logging.finalize("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")

    def setup(self, stage: str) -> None:
        """Connect the module, set up the processes, the loggers' directory, ``setup`` hooks and ``configure_model``."""
        trainer = self.trainer
        strategy = trainer.strategy
        module = trainer.module
        strategy.connect(module, backward=module.backward if is_overridden(module, "backward", Module) else None)
        strategy.setup_environment()
        rank_zero_only.rank = strategy.global_rank
        if trainer.deterministic is not None:
            apply_deterministic(trainer.deterministic, trainer.accelerator)
        apply_benchmark(trainer.benchmark, trainer.deterministic, trainer.accelerator)
        self._logging.refuse_unwritable_dirs()
        trainer.profiler.setup(stage, strategy.local_rank, trainer.log_dir)
        self._hooks.profiler = trainer.profiler
        results = self._logging.reset_results()
        trainer.module._results = BAREBONES_RESULTS if trainer.barebones else results
        self._hooks.reset()
        self._data.prepare_data()
        self._logging.agree_on_log_dir()
        if trainer.datamodule is not None:
            trainer.datamodule.setup(stage=stage)  # by keyword, as Lightning calls it
        self._hooks.call("setup", stage=stage)
        configure = _configure_model_hook(trainer.module)
        if configure is not None:
            with strategy.tensor_init_context(), strategy.model_sharded_context():
                configure()
        if trainer.sync_batchnorm:
            convert_sync_batchnorm(trainer.module, strategy.world_size)

    def teardown(self, stage: str) -> None:
        """Run the ``teardown`` hooks, flush the checkpoint writes and tear the strategy down, whatever fails."""
        trainer = self.trainer
        try:
            if trainer.datamodule is not None:
                trainer.datamodule.teardown(stage=stage)
            self._hooks.call("teardown", stage=stage)
        finally:
            trainer.strategy.checkpoint_io.flush()
            trainer.strategy.teardown()
            trainer.module._results = None
            trainer.module._step_optimizers = []
            trainer.module._manual_backward = None
            trainer.profiler.describe()

    def fit(self, train_dataloaders: Any, val_dataloaders: Any, ckpt_path: str | None) -> None:
        """The body of ``Trainer.fit`` on each process: set up, restore ``ckpt_path``, sanity check, train."""
        trainer = self.trainer
        self.setup("fit")
        try:
            self._data.setup_fit(train_dataloaders, val_dataloaders)
            self._data.warn_if_validation_is_skipped()
            self._data.warn_if_reload_cannot_reload()
            trainer.strategy.setup(functools.partial(configure_optimizers, trainer))
            checkpoint = self._checkpoints.load_for_fit(ckpt_path)
            if checkpoint is not None:
                self._checkpoints.restore_model(checkpoint)
            self._hooks.call("on_fit_start")
            if trainer.enable_autolog_hparams:
                self._logging.log_hyperparams()
            self._logging.log_graph()
            if checkpoint is not None:
                self._checkpoints.restore_training_state(checkpoint)
            self._checkpoints.prepare_io()
            self._preemption.start()
            self._signals.start()  # after the environment's handlers (SLURM's SIGTERM), which it leaves alone
            trainer.module.zero_grad()  # gradients left from before the run are not this run's
            with _anomaly_detection(trainer.detect_anomaly):
                trainer.fit_loop.sanity_check()
                trainer.fit_loop.run()
            self._hooks.call("on_fit_end")
            self._logging.finalize("success")
        except ExitRun:
            pass  # a tuner finder ended the run on purpose: tear down and return, as after success
        except TrainingInterrupted as stop:  # raised on every process at the same step: wind down together
            self.on_exception(stop)  # the interruption checkpoint, the loggers flushed
            stop.handled = True
            raise
        except BaseException as exc:
            self.on_exception(exc)  # before teardown: the model, the strategy and its process group are still up
            raise
        finally:
            try:
                self._checkpoints.stop_preparing()
                self.teardown("fit")  # flushes checkpoint writes before a held-back SIGTERM may be re-sent
            finally:
                self._signals.stop()
                self._preemption.stop()

    def default_weights(self, fn: TrainerFn) -> str | None:
        """The weights ``validate``/``test``/``predict`` use when given neither a model nor ``ckpt_path``.

        As in Lightning, the best checkpoint of the first ModelCheckpoint (``"best"``), with a warning
        saying so; where none was saved, the weights in memory, as the last run left them, with a
        warning too (Lightning raises there).
        """
        callback = self.trainer.checkpoint_callback
        best = getattr(callback, "best_model_path", "") if callback is not None else ""
        choose = (
            f"Hint: pass ckpt_path='best', 'last' or a path to choose (and silence this), or the model to "
            f"use its weights as they are: trainer.{fn.value}(model, ...)."
        )
        if best:
            rank_zero_warn(
                f"trainer.{fn.value}() was called without a model or ckpt_path: the best checkpoint of the "
                f"previous fit is loaded ({best}), as in Lightning. {choose}"
            )
            return "best"
        rank_zero_warn(
            f"trainer.{fn.value}() was called without a model or ckpt_path, and no ModelCheckpoint saved a best "
            f"checkpoint: the weights in memory, as the last run left them, are used (Lightning would load the best "
            f"checkpoint, or raise). {choose}"
        )
        return None

    def evaluate(self, fn: TrainerFn, dataloaders: Any, ckpt_path: str | None, keep: bool, verbose: bool) -> Any:
        """The body of ``validate``/``test``/``predict`` on each process; returns their metrics or predictions."""
        trainer = self.trainer
        self.setup(fn.value)
        try:
            loaders, limits = self._data.setup_evaluation(fn, dataloaders)
            trainer.strategy.setup(None)
            self._checkpoints.restore_for_evaluation(ckpt_path, fn.value)
            trainer.module.zero_grad()
            if fn is TrainerFn.PREDICTING:
                predictions = trainer.predict_loop.run(loaders, limits, keep)
                self._logging.finalize("success")
                return (predictions[0] if len(predictions) == 1 else predictions) if keep else None
            loop = trainer.validate_loop if fn is TrainerFn.VALIDATING else trainer.test_loop
            results = loop.run(loaders, limits)
            # Every stage ends its loggers' runs, as in Lightning: a tracker's run opened for a validate
            # alone must not stay open (a later stage opens it again).
            self._logging.finalize("success")
            if verbose and trainer.is_global_zero:
                print_results(results, fn.value)
            return results
        except BaseException as exc:
            self.on_exception(exc)  # before teardown, as in fit
            raise
        finally:
            self.teardown(fn.value)


def _configure_model_hook(module: Module) -> Callable[[], None] | None:
    """The module's ``configure_model``, or its older name ``configure_sharded_model`` (with a deprecation warning)."""
    if is_overridden(module, "configure_model", Module):
        return module.configure_model
    if is_overridden(module, "configure_sharded_model", Module):
        rank_zero_warn(
            f"{type(module).__name__} overrides configure_sharded_model, the older name of configure_model; it runs "
            "as configure_model. Hint: rename it to configure_model.",
            category=DeprecationWarning,
        )
        return module.configure_sharded_model
    return None


def _unwrap_compiled(model: Any) -> Any:
    """The Module inside ``torch.compile(module)``, its ``forward`` replaced by the compiled one.

    torch._dynamo is imported only when it already was: a model can be compiled only after it.
    """
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not isinstance(model, dynamo.OptimizedModule):
        return model
    module = model._orig_mod
    if not isinstance(module, Module):
        return model  # refused by the caller, naming its type
    if module.__dict__.get("_compiled_by") is not model:  # once per compiled wrapper: never compile twice
        module.__dict__["_compiled_by"] = model
        module.forward = model.dynamo_ctx(module.forward)  # the original forward, compiled as torch.compile would
    return module


@contextlib.contextmanager
def _anomaly_detection(enabled: bool) -> Generator[None, None, None]:
    if not enabled:
        yield
        return
    import torch

    with torch.autograd.detect_anomaly():
        yield


def _caused_by(exc: BaseException, handled: BaseException | None) -> bool:
    """Whether ``exc`` is ``handled`` or was raised from it (a launcher re-raises a rank's failure in its words)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if current is handled:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
