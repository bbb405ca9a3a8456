"""The training loop: epochs of batches, validation when due, and an exact resume from any checkpoint.

Its semantics are Lightning 2.x's (hook order, when the optimizer steps and zeroes, when
schedulers step, when validation runs, at which step metrics are logged); its per-batch path is
built once per epoch from the hooks somebody overrides (see :mod:`torchplug.loops.optimization`),
so what nobody overrides costs nothing. The loop uses only the Trainer's public API and the
objects it is handed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from torchplug._errors import MisconfigurationError
from torchplug.loops.evaluation import EvaluationLoop
from torchplug.loops.nonfinite import LossCheck
from torchplug.loops.optimization import (
    automatic_outputs,
    automatic_step,
    batches_per_optimizer_step,
    manual_backward,
    manual_optimizers,
    manual_step,
)
from torchplug.loops.progress import Counters, EpochLoop
from torchplug.loops.schedulers import SchedulerStepper
from torchplug.loops.shard_check import warn_if_every_process_got_the_same_batch
from torchplug.trainer.checkpoint_connector import gradients_of, load_gradients
from torchplug.trainer.checkpoint_layout import lightning_loops
from torchplug.trainer.data import batch_transfer
from torchplug.trainer.metrics import BATCH_TRAIN, EPOCH
from torchplug.trainer.states import FitProgress, RunningStage
from torchplug.utilities.combined_loader import CombinedLoader
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torchplug.utilities.seed import capture_rng_states, restore_rng_states

if TYPE_CHECKING:
    from torchplug.loops.state import RunState
    from torchplug.profilers.profiler import Profiler
    from torchplug.strategies.strategy import Strategy
    from torchplug.trainer.data import DataConnector
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector
    from torchplug.trainer.preemption import PreemptionWatch
    from torchplug.trainer.signals import SignalStop

__all__ = ["FitLoop"]


def _skip(iterator: Iterator[Any], count: int) -> None:
    """Advance a fresh dataloader iterator by ``count`` batches, without loading them when possible."""
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    if sampler_iter is not None and getattr(iterator, "_num_workers", 1) == 0:
        # Single-process DataLoader: skipping indices is exact and skips the loading cost.
        for _ in range(count):
            next(sampler_iter)
        iterator._num_yielded += count  # type: ignore[attr-defined]  # torch's private counter, kept consistent
        return
    for _ in range(count):
        next(iterator)


def _set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Let DistributedSampler and friends reshuffle per epoch: the loader's sampler and batch sampler, once each."""
    seen: set[int] = set()
    for each in getattr(loader, "flattened", None) or [loader]:  # a CombinedLoader's loaders, each
        for sampler in (getattr(each, "sampler", None), getattr(each, "batch_sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch) and id(sampler) not in seen:
                seen.add(id(sampler))
                set_epoch(epoch)


class FitLoop:
    """Runs ``fit``: epochs, batches, optimizer steps, validation, and the epoch-end work.

    Args:
        run: The run's configuration and state (module, optimizers, stop request).
        strategy: The strategy (devices, processes, collectives).
        hooks: Runs the callbacks' and the module's hooks.
        logging: Sends the logged metrics to the loggers.
        data: The run's dataloaders.
        preemption: Watches for a scheduler's preemption notice.
        profiler: Times the epochs and batches when active.
        signals: Stops training at a batch boundary after SIGINT or SIGTERM (None: not watched).
        ckpt_path: The checkpoint the run resumed from (None: a fresh start), for messages.
    """

    def __init__(
        self,
        run: RunState,
        *,
        strategy: Strategy,
        hooks: HookRunner,
        logging: LoggerConnector,
        data: DataConnector,
        preemption: PreemptionWatch,
        profiler: Profiler,
        signals: SignalStop | None = None,
        ckpt_path: Callable[[], str | None] | None = None,
    ) -> None:
        self._run = run
        self._strategy = strategy
        self._profiler = profiler
        self._ckpt_path = ckpt_path
        self._signals = signals
        self._hooks = hooks
        self._logging = logging
        self._data = data
        self._preemption = preemption
        self.progress = FitProgress()
        #: The validation loop run inside ``fit``.
        self.val_loop = EvaluationLoop(
            run,
            strategy=strategy,
            hooks=hooks,
            logging=logging,
            stage=RunningStage.VALIDATING,
            logger_step=self._stepped_batches,
            inside_fit=True,
        )
        #: The loss of the last training batch, as computed (not detached: use :attr:`last_loss` to read it).
        self.raw_loss: torch.Tensor | None = None
        #: What the last training_step returned (manual optimization: its ``outputs``); see ``automatic_outputs``.
        self.step_output: Any = None
        #: Validate every this many batches (``inf``: at the end of each epoch of an unsized loader).
        self.val_check_batch: float = math.inf
        #: With a time ``val_check_interval``: the seconds between validations (None: counted in batches).
        self.val_check_seconds: float | None = None
        self._last_validation = 0.0  # time.monotonic() when training started or the last validation ended
        #: The non-finite loss check of the run in progress (``Trainer(nonfinite_loss=...)``).
        self.loss_check = LossCheck(run.config, strategy, self.progress)
        self._schedulers = SchedulerStepper(run, hooks, logging, self._current_epoch)
        self._resume_rng: dict[str, Any] | None = None
        self._resume_gradients: list[torch.Tensor | None] | None = None
        self._pending_gradients = False  # gradients accumulated since the last optimizer step
        self._stepped_pending = False  # the finished batch stepped; the logger's step count is not yet advanced
        # Decided once per epoch, read after every batch:
        self._plateau_steps = False  # a step-interval ReduceLROnPlateau exists
        self._logs = False  # this process has loggers
        self._validates = False  # fit validates (data, batches, validation_step)
        self._validation_due: Callable[[int, bool], bool] = self._due_by_batches  # by time or by batches
        self._check_loss_every = 0  # check the loss every this many batches (nonfinite_loss="raise")
        self._compare_shards = True  # the first batch is still to be compared across processes
        #: Whether the loop was restored from a checkpoint and has not run a batch since (Lightning's ``restarting``).
        self.restarting = False
        self._epoch_loop = EpochLoop(self)

    # -- the run's limits, Lightning's way to change them between fit() calls ----------------------
    # They live in the run's LoopConfig (trainer.max_epochs reads the same value); setting them goes
    # through RunState.configure, so ``trainer.fit_loop.max_epochs = 5`` before a second fit() trains
    # on, as in Lightning, checked as the argument is.

    @property
    def max_epochs(self) -> int | None:
        """The Trainer's ``max_epochs``; set it to train on in a later ``fit()`` (checked like the argument)."""
        return self._run.config.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int | None) -> None:
        self._run.configure("max_epochs", value, "fit_loop.max_epochs")

    @property
    def max_steps(self) -> int:
        """The Trainer's ``max_steps`` (-1: no limit); settable, like :attr:`max_epochs`."""
        return self._run.config.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self._run.configure("max_steps", value, "fit_loop.max_steps")

    @property
    def min_epochs(self) -> int | None:
        """The Trainer's ``min_epochs``; settable, like :attr:`max_epochs`."""
        return self._run.config.min_epochs

    @min_epochs.setter
    def min_epochs(self, value: int | None) -> None:
        self._run.configure("min_epochs", value, "fit_loop.min_epochs")

    @property
    def min_steps(self) -> int | None:
        """The Trainer's ``min_steps``; settable, like :attr:`max_epochs`."""
        return self._run.config.min_steps

    @min_steps.setter
    def min_steps(self, value: int | None) -> None:
        self._run.configure("min_steps", value, "fit_loop.min_steps")

    # -- state ------------------------------------------------------------------------------------

    @property
    def last_loss(self) -> torch.Tensor | None:
        """The loss of the last training batch (detached), for the progress bar."""
        return None if self.raw_loss is None else self.raw_loss.detach()

    def restore(
        self, state: dict[str, Any], rng: dict[str, Any] | None, gradients: list[torch.Tensor | None] | None
    ) -> None:
        """Continue from a checkpoint's loop state (see :class:`FitProgress`)."""
        self.progress = FitProgress()
        self.progress.load_state_dict(state)
        if self.progress.epoch_finished:
            self._next_epoch()
        self._resume_rng = rng
        self._resume_gradients = gradients
        self._pending_gradients = gradients is not None
        self.restarting = True

    def state_dict(self) -> dict[str, Any]:
        """The loop's position for a checkpoint (plain data), as :class:`FitProgress` describes it."""
        state = self.progress.state_dict()
        if self._stepped_pending and self.progress.tail_done:  # written after the validation of a stepped batch
            state["stepped_batches"] += 1
        return state

    # -- Lightning's loop surface: views of the position above ---------------------------------------

    @property
    def epoch_loop(self) -> EpochLoop:
        """The training epoch's batch position (``epoch_loop.batch_progress``, ``global_step``...), as in Lightning."""
        return self._epoch_loop

    @property
    def epoch_progress(self) -> Counters:
        """Epochs: ``current`` and ``total`` counters (``ready``, ``started``, ``processed``, ``completed``)."""
        return Counters(self.lightning_counters()["epoch_progress"])

    @property
    def total_batch_idx(self) -> int:
        """The index of the last training batch run, over all epochs (-1 before the first)."""
        return self.progress.total_batches - 1

    @property
    def batch_idx(self) -> int:
        """The index of the last training batch run in this epoch (-1 before its first)."""
        return self.progress.batches_done - 1

    def lightning_counters(self) -> dict[str, Any]:
        """The fit loop's position as Lightning's progress counters (its checkpoints' ``loops.fit_loop`` entry)."""
        run = self._run
        batches = self._data.num_training_batches if self._data.train_loader is not None else float("inf")
        accumulate = batches_per_optimizer_step(run.config, self._strategy)
        counters: dict[str, Any] = lightning_loops(self.state_dict(), batches, accumulate)["fit_loop"]
        return counters

    def mark_validated(self) -> None:
        """Record that the validation due after the last batch has run (a checkpoint from now on resumes past it)."""
        self.progress.tail_done = True

    def accumulated_gradients(self) -> list[torch.Tensor | None] | None:
        """The gradients accumulated since the last optimizer step, when a checkpoint falls in the middle."""
        module = self._run.module
        return gradients_of(module) if self._pending_gradients and module is not None else None

    def _stepped_batches(self) -> int:
        return self.progress.stepped_batches

    def _current_epoch(self) -> int:
        return self.progress.epoch

    def count_optimizer_step(self) -> None:
        """Count one optimizer step (manual optimization counts each ``optimizer.step()``)."""
        self.progress.global_step += 1

    def _next_epoch(self) -> None:
        progress = self.progress
        progress.epoch += 1
        progress.batches_done = 0
        progress.tail_done = True
        progress.epoch_finished = False
        progress.epoch_rng = None

    def reload_dataloaders(self) -> None:
        """Ask the DataModule (else the module) for the training and validation dataloaders again.

        For code that changes what those hooks return in the middle of a fit (the batch size
        finder sets a new ``batch_size``): the new loaders, their batch counts and the validation
        schedule take effect from the next epoch (or the next :meth:`run`).

        Raises:
            MisconfigurationError: The fit's dataloaders were passed to ``fit()`` itself, so there
                is nothing to ask again.
        """
        if not self._data.fit_loaders_from_hooks:
            raise MisconfigurationError(
                "The dataloaders were passed to fit() directly, so they cannot be built again. Hint: return them "
                "from train_dataloader()/val_dataloader() of the module or a DataModule."
            )
        self._data.reload_fit()
        self.setup_validation_schedule()

    # -- validation schedule ----------------------------------------------------------------------

    @property
    def validation_enabled(self) -> bool:
        """Whether ``fit`` validates: validation data with batches, and a module that defines ``validation_step``.

        Known once the validation loaders were requested (the sanity check, or the start of training).
        """
        return bool(self._data.val_loaders) and any(self._data.num_val_batches)

    def setup_validation_schedule(self) -> None:
        """Turn ``val_check_interval`` into a number of batches, once the training loader is known."""
        config = self._run.config
        interval, batches = config.val_check_interval, self._data.num_training_batches
        self.val_check_seconds = None
        if isinstance(interval, timedelta):  # by time: no batch count to derive, any loader will do
            self.val_check_seconds = interval.total_seconds()
            self.val_check_batch = math.inf
        elif isinstance(interval, int):
            if config.check_val_every_n_epoch is not None and interval > batches and self.validation_enabled:
                raise MisconfigurationError(
                    f"val_check_interval={interval} is more than the {batches} training batches of an epoch. "
                    "Hint: lower it, pass check_val_every_n_epoch=None to count batches across epochs, or "
                    "limit_val_batches=0 to turn validation off."
                )
            self.val_check_batch = interval
        elif math.isinf(batches):
            if interval != 1.0:
                raise MisconfigurationError(
                    f"val_check_interval={interval!r} needs a training dataloader with a length. "
                    "Hint: give an int number of batches instead, or 1.0 for the end of the data."
                )
            self.val_check_batch = math.inf
        else:
            self.val_check_batch = max(1, int(batches * interval))

    def _check_logging_interval(self) -> None:
        """Warn when an epoch has fewer batches than ``log_every_n_steps`` (step metrics become rare, or never written).

        Step metrics reach the loggers every ``log_every_n_steps`` optimizer steps, counted across
        epochs; with fewer batches than that in an epoch, a short run writes none at all (Lightning
        warns the same way).
        """
        batches = self._data.num_training_batches
        every = self._run.config.log_every_n_steps
        if not self._logging.loggers or self._run.config.fast_dev_run or math.isinf(batches) or not 0 < batches < every:
            return
        from torchplug.utilities.warnings import PossibleUserWarning  # a module of its own: loaded when it warns

        rank_zero_warn(
            f"An epoch has {int(batches)} training batches, fewer than log_every_n_steps={every}: metrics logged "
            f"on_step reach the loggers only every {every} optimizer steps, across epochs, so a short run writes "
            f"few or none. Hint: Trainer(log_every_n_steps={int(batches)}) or lower writes them every epoch.",
            category=PossibleUserWarning,
        )

    def can_stop_early(self) -> bool:
        """Whether ``min_epochs`` and ``min_steps`` allow training to stop now."""
        config, progress = self._run.config, self.progress
        enough_epochs = progress.epoch >= (config.min_epochs or 0)
        enough_steps = config.min_steps is None or progress.global_step >= config.min_steps
        return enough_epochs and enough_steps

    def should_validate(self, batch_idx: int, is_last: bool) -> bool:
        """Whether validation runs after batch ``batch_idx`` of this epoch.

        With a time ``val_check_interval``: once that much time has passed since training started
        or the last validation ended, as in Lightning (not at the end of an epoch otherwise).
        """
        due = self._due_by_time if self.val_check_seconds is not None else self._due_by_batches
        return due(batch_idx, is_last)

    def _due_by_time(self, batch_idx: int, is_last: bool) -> bool:
        """One clock read per batch, only for a time ``val_check_interval`` (chosen once per epoch)."""
        every = self._run.config.check_val_every_n_epoch
        if every is not None and (self.progress.epoch + 1) % every:
            return False
        if self._run.should_stop and self.can_stop_early():
            return True
        assert self.val_check_seconds is not None
        return time.monotonic() - self._last_validation >= self.val_check_seconds

    def _due_by_batches(self, batch_idx: int, is_last: bool) -> bool:
        every = self._run.config.check_val_every_n_epoch
        if every is not None and (self.progress.epoch + 1) % every:
            return False
        check = self.val_check_batch
        if math.isinf(check):
            return is_last
        if self._run.should_stop and self.can_stop_early():
            return True
        count = batch_idx if every is not None else self.progress.total_batches - 1
        return (count + 1) % check == 0

    def run_validation(self) -> None:
        """Run the validation loop inside ``fit``, then go back to training."""
        self.val_loop.run(self._data.val_loaders, self._data.num_val_batches, after_batches=self.mark_validated)
        self._last_validation = time.monotonic()  # a time val_check_interval counts from here
        self._run.status.stage = RunningStage.TRAINING
        assert self._logging.results is not None
        self._logging.results.set_stage("train", reset=False)
        self._logging.results.phase = BATCH_TRAIN

    def sanity_check(self) -> None:
        """Run a few validation batches before training, to find bugs in ``validation_step`` early.

        The random state is restored afterwards (Python, NumPy, torch and the accelerator's), so
        training draws the same numbers with or without the sanity check.
        """
        status = self._run.status
        steps = self._run.config.num_sanity_val_steps
        if not steps or not self._data.validation_possible or self.progress.global_step:
            return
        accelerator = self._strategy.accelerator
        assert accelerator is not None, "resolution always sets the accelerator"
        rng, device_rng = capture_rng_states(), accelerator.get_rng_state()
        status.stage = RunningStage.SANITY_CHECKING
        for hook in self._hooks.callbacks("on_sanity_check_start"):
            hook()
        self._data.setup_val()  # val_dataloader() is called here, as in Lightning
        if self.validation_enabled:
            limits = [n if steps == -1 else min(steps, n) for n in self._data.num_val_batches]
            self.val_loop.run(self._data.val_loaders, limits, sanity=True)
            assert self._logging.results is not None
            self._logging.results.drop_stage("sanity_check")
            self._logging.reset_metrics()  # the sanity check's values reach no logger and no later callback
        for hook in self._hooks.callbacks("on_sanity_check_end"):
            hook()
        status.stage = None
        restore_rng_states(rng)
        if device_rng is not None:
            accelerator.set_rng_state(device_rng)

    # -- the loop ---------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether training should end now (max_steps, max_epochs, or a stop request past the minimums)."""
        config, progress = self._run.config, self.progress
        if config.max_steps != -1 and progress.global_step >= config.max_steps:
            return True
        if config.max_epochs is not None and config.max_epochs != -1 and progress.epoch >= config.max_epochs:
            return True
        return self._run.should_stop and self.can_stop_early()

    def run(self) -> None:
        """Train until :meth:`done`."""
        run, config = self._run, self._run.config
        module = run.module
        assert module is not None
        self._compare_shards = True
        # As in Lightning: train_dataloader() here, after the sanity check, then val_dataloader() unless it ran
        self._data.setup_train()
        self._data.setup_val()
        self.setup_validation_schedule()
        self._check_logging_interval()
        if self._data.num_training_batches == 0:
            if config.limit_train_batches == 0:  # asked for: said at the info level
                rank_zero_info("fit() stopped: no training batches (limit_train_batches=0 or an empty loader).")
            else:
                rank_zero_warn(
                    "fit() stopped: the training dataloader has no batches (its length is 0), so nothing was "
                    "trained. Hint: check the dataset's size against the batch size (drop_last=True drops a "
                    "last, smaller batch) and the split that train_dataloader() returns."
                )
            return
        if config.max_epochs == 0:  # asked for: said at the info level, as Lightning does
            rank_zero_info("fit() stopped: max_epochs=0, so no epoch runs.")
            return
        if self.done:
            self._warn_nothing_left()
            return
        self._warn_if_eval_mode()
        self.loss_check = LossCheck(config, self._strategy, self.progress)
        if not module.automatic_optimization:
            if self.loss_check.mode == "skip":
                raise MisconfigurationError(
                    "nonfinite_loss='skip' needs automatic optimization: with manual optimization your "
                    "training_step steps the optimizers itself. Hint: check the loss there "
                    "(torch.isfinite(loss)) before calling step(), and use nonfinite_loss='raise' or 'ignore'."
                )
            module._step_optimizers = manual_optimizers(run, self._strategy, self, self._hooks)
            module._manual_backward = manual_backward(self._strategy, self._hooks)
        results = self._logging.results
        assert results is not None
        run.status.stage = RunningStage.TRAINING
        results.set_stage("train", reset=False)
        results.phase = EPOCH  # on_train_start may log epoch values
        self._hooks.call("on_train_start")
        self._last_validation = time.monotonic()  # a time val_check_interval counts from the start of training
        profiler = self._profiler
        run_epoch = profiler.wrap("run_training_epoch", self.run_epoch) if profiler.active else self.run_epoch
        while not self.done and not self._preemption.preempted:
            steps, fresh = self.progress.global_step, self.progress.batches_done == 0
            run_epoch()
            if fresh and self.progress.global_step == steps and run.config.max_epochs in (None, -1):
                self._warn_no_step(steps)
                break
        if self.progress.batches_done:  # stopped in the middle of an epoch: its end did not check
            self.loss_check.check(self.raw_loss, self.progress.batches_done - 1)
        results.phase = None
        self._hooks.call("on_train_end")

    def _warn_nothing_left(self) -> None:
        """fit() starts where its limits are already reached (a checkpoint of a finished run): it trains nothing."""
        config, progress = self._run.config, self.progress
        ckpt_path = self._ckpt_path() if self._ckpt_path is not None else None
        if config.max_steps != -1 and progress.global_step >= config.max_steps:
            reached = f"max_steps={config.max_steps} is already reached"
        elif config.max_epochs not in (None, -1) and progress.epoch >= config.max_epochs:
            reached = f"max_epochs={config.max_epochs} is already reached"
        else:
            reached = "the run had been asked to stop (trainer.should_stop, set by EarlyStopping for example)"
        where = f"epoch {progress.epoch}, global step {progress.global_step}"
        if ckpt_path is None:  # a second fit() of the same Trainer goes on from where the first ended
            rank_zero_warn(
                f"fit() trained nothing: this Trainer's earlier fit() ended at {where}, where {reached}, and a "
                "Trainer goes on from where it stopped. Hint: raise trainer.fit_loop.max_epochs (or max_steps) "
                "to train on, or create a new Trainer to train from the start."
            )
            return
        rank_zero_warn(
            f"fit() trained nothing: it resumed from {ckpt_path!r} at {where}, where {reached}. Hint: raise "
            "max_epochs or max_steps to train on from this checkpoint, or start without ckpt_path."
        )

    def _warn_no_step(self, steps: int) -> None:
        """An epoch took no optimizer step, and only max_steps bounds the run: it would never end."""
        config = self._run.config
        rank_zero_warn(
            f"fit() stopped after epoch {self.progress.epoch - 1}: the epoch took no optimizer step (global step "
            f"still {steps}), and with max_epochs={config.max_epochs} and max_steps={config.max_steps} fit() "
            "would run forever. Causes: a training dataloader that yields no batch, on_train_batch_start "
            "returning -1 at the first batch, or manual optimization that never calls optimizer.step(). Hint: fix "
            "the cause, or set max_epochs to bound the run in epochs."
        )

    def _warn_if_eval_mode(self) -> None:
        module = self._run.module
        assert module is not None
        in_eval = [name or "(the module)" for name, m in module.named_modules() if not m.training]
        if in_eval:
            from torchplug.utilities.warnings import PossibleUserWarning  # a module of its own: loaded when it warns

            rank_zero_warn(
                f"{len(in_eval)} module(s) are in eval mode at the start of training ({', '.join(in_eval[:5])}"
                f"{', ...' if len(in_eval) > 5 else ''}): dropout and batch norm behave as in evaluation. If this "
                "is not intended, call model.train() before fit().",
                category=PossibleUserWarning,
            )

    def run_epoch(self) -> None:
        """One epoch (or the rest of one, when resuming), then the epoch-end work (unless preempted)."""
        progress = self.progress
        self._run.status.stage = RunningStage.TRAINING
        resuming = progress.batches_done > 0
        every = self._run.config.reload_dataloaders_every_n_epochs
        if every and not resuming and progress.epoch and progress.epoch % every == 0:
            self._data.reload_fit()
            self.setup_validation_schedule()
        assert self._logging.results is not None
        self._logging.results.set_stage("train", reset=False)  # cleared at the end of each epoch
        iterator = self._epoch_iterator()
        self._plateau_steps = self._schedulers.has_plateau_step_interval
        self._logs = bool(self._logging.loggers)
        self._validates = self.validation_enabled
        self._validation_due = self._due_by_time if self.val_check_seconds is not None else self._due_by_batches
        self._check_loss_every = self.loss_check.every
        stop = False
        results = self._logging.results
        if not resuming:
            results.phase = EPOCH
            self._hooks.call("on_train_epoch_start")
        elif not progress.tail_done:  # the checkpoint was written before the last batch's validation
            is_last = progress.batches_done >= self._data.num_training_batches
            stop = self._after_batch(progress.batches_done - 1, is_last, not self._pending_gradients, resumed=True)
        results.phase = BATCH_TRAIN  # self.log in training_step and the batch hooks
        if not stop:
            self._run_batches(iterator)
        if not self._preemption.preempted:
            self._epoch_end()

    def _rewrap_manual_optimizers(self) -> None:
        """Manual optimization: ``self.optimizers()`` returns the optimizers made anew since the last epoch.

        (``trainer.strategy.setup_optimizers(trainer)`` replaces them; automatic optimization picks
        them up as it builds the epoch's step.) Checked once per epoch.
        """
        run, module = self._run, self._run.module
        if module is None or module.automatic_optimization:
            return
        if [wrapped.optimizer for wrapped in module._step_optimizers] != run.optimizers:
            module._step_optimizers = manual_optimizers(run, self._strategy, self, self._hooks)

    def _epoch_iterator(self) -> Iterator[Any]:
        progress = self.progress
        loader = self._data.train_loader
        if progress.epoch_rng is None:
            if self._resume_rng is not None:  # resuming at an epoch boundary
                restore_rng_states(self._resume_rng)
                self._resume_rng = None
            progress.epoch_rng = capture_rng_states()
        else:
            restore_rng_states(progress.epoch_rng)
        _set_sampler_epoch(loader, progress.epoch)
        iterator: Iterator[Any] = loader.batches() if isinstance(loader, CombinedLoader) else iter(loader)
        if progress.batches_done:
            # Never past the end: resumed on more processes (or less data), the epoch may be shorter now.
            _skip(iterator, int(min(progress.batches_done, self._data.num_training_batches)))
        if self._resume_rng is not None:
            restore_rng_states(self._resume_rng)
            self._resume_rng = None
        if self._resume_gradients is not None and self._run.module is not None:
            load_gradients(self._run.module, self._resume_gradients)
            self._resume_gradients = None
        self.restarting = False  # the checkpoint's position is in place: from here on the loop runs anew
        strategy = self._strategy
        if self._compare_shards and not progress.batches_done and getattr(strategy, "distinct_batches", False):
            self._compare_shards = False  # once per fit: the first epoch that starts from its first batch
            if strategy.world_size > 1:
                iterator = warn_if_every_process_got_the_same_batch(strategy, iterator)
        return iterator

    def _run_batches(self, iterator: Iterator[Any]) -> None:
        """Run the epoch's remaining batches, until the data ends, the limit, -1 from a hook, or a stop."""
        progress = self.progress
        limit = self._data.num_training_batches
        batch_idx = progress.batches_done
        run_batch = self._batch_function()
        sized = not math.isinf(limit)
        pending: Any = _NOTHING
        while batch_idx < limit:
            if pending is _NOTHING:
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
            else:
                batch, pending = pending, _NOTHING
            if sized:
                is_last = batch_idx + 1 >= limit
            else:  # look one batch ahead, to know the last batch of an unsized loader
                try:
                    pending = next(iterator)
                    is_last = False
                except StopIteration:
                    is_last = True
            should_step = run_batch(batch, batch_idx, is_last)
            if should_step is None:  # on_train_batch_start returned -1: the epoch ends now
                self._end_epoch_early(batch_idx)
                return
            if self._after_batch(batch_idx, is_last, should_step, resumed=False):
                return
            batch_idx += 1

    def _end_epoch_early(self, batch_idx: int) -> None:
        """``on_train_batch_start`` returned -1: the epoch-interval schedulers step now, as at the epoch's last batch.

        As in Lightning (2.6), skipping the rest of an epoch still ends an epoch for the schedulers;
        step-interval schedulers step only after an optimizer step, and this batch took none.
        """
        if self._schedulers.has_epoch_interval:  # (manual optimization: the module steps its own)
            self._schedulers.step("epoch", batch_idx, plateau=False)

    def _batch_function(self) -> Callable[[Any, int, bool], bool | None]:
        """Build the per-batch function once per epoch, binding only the hooks somebody overrides."""
        run, strategy, progress, hooks = self._run, self._strategy, self.progress, self._hooks
        module = run.module
        assert module is not None
        self._rewrap_manual_optimizers()
        results = self._logging.results
        assert results is not None
        transfer = batch_transfer(strategy, module, run.datamodule, 0)
        callbacks_start = hooks.callbacks("on_train_batch_start")
        module_start = hooks.module_hook("on_train_batch_start")
        on_end = hooks.batch_hooks("on_train_batch_end")
        automatic = module.automatic_optimization
        train_step = automatic_step(run, strategy, self, hooks) if automatic else manual_step(run, strategy, self)
        accumulate = batches_per_optimizer_step(run.config, strategy) if automatic else 1
        schedulers = self._schedulers
        profiler = self._profiler
        if profiler.active:  # decided once per epoch: without a profiler nothing is wrapped
            transfer = profiler.wrap("batch_to_device", transfer)
            train_step = profiler.wrap("run_training_batch", train_step)
        step_schedulers = automatic and schedulers.has_step_interval
        epoch_schedulers = automatic and schedulers.has_epoch_interval

        def run_batch(batch: Any, batch_idx: int, is_last: bool) -> bool | None:
            batch = transfer(batch)
            results.current_batch = batch
            if callbacks_start:  # an empty loop still builds an iterator per batch
                for hook in callbacks_start:
                    hook(batch, batch_idx)
            if module_start is not None and module_start(batch, batch_idx) == -1:
                return None
            should_step = accumulate == 1 or is_last or (batch_idx + 1) % accumulate == 0
            train_step(batch, batch_idx, should_step)
            self._pending_gradients = not should_step
            progress.batches_done = batch_idx + 1
            progress.total_batches += 1
            progress.tail_done = False
            if step_schedulers and should_step:
                schedulers.step("step", batch_idx, plateau=False)
            if epoch_schedulers and is_last:
                schedulers.step("epoch", batch_idx, plateau=False)
            if on_end:
                outputs = automatic_outputs(self.step_output, self.raw_loss) if automatic else self.step_output
                for hook in on_end:
                    hook(outputs, batch, batch_idx)
            return should_step

        return run_batch

    def _after_batch(self, batch_idx: int, is_last: bool, should_step: bool, resumed: bool) -> bool:
        """Work after a finished batch: logging, validation when due, plateau schedulers, preemption, stop checks.

        ``resumed``: this is the end of a batch that finished before the checkpoint a run resumed from
        (its step metrics were never kept, so they are not logged). Returns True when training must stop now.
        """
        run, progress, logging = self._run, self.progress, self._logging
        every = self._check_loss_every
        if every and not resumed and progress.total_batches % every == 0:
            self.loss_check.check(self.raw_loss, batch_idx)  # one sync every log_every_n_steps batches, none else
        self._stepped_pending = should_step
        stepped = progress.stepped_batches
        if (
            self._logs
            and should_step
            and not resumed
            and ((stepped + 1) % run.config.log_every_n_steps == 0 or run.should_stop)
        ):
            logging.log_step_metrics(stepped)
        if self._validates and self._validation_due(batch_idx, is_last):
            if should_step:
                self._hooks.call_module("on_validation_model_zero_grad")
            self.run_validation()
        if should_step and self._plateau_steps:
            self._schedulers.step("step", batch_idx, plateau=True)
        if self._stepped_pending:
            progress.stepped_batches += 1
            self._stepped_pending = False
        progress.tail_done = True
        if self._signals is not None and self._signals.hold:  # SIGINT/SIGTERM: every process stops at one boundary
            self._signals.at_boundary(progress.total_batches)
        if self._preemption.active and not self._pending_gradients and self._preemption.requested():
            self._preemption.handle()
            return True
        max_steps = run.config.max_steps
        if max_steps != -1 and progress.global_step >= max_steps:
            return True
        return run.should_stop and self.can_stop_early()

    def _epoch_end(self) -> None:
        """The epoch-end hooks, metrics and plateau schedulers.

        The monitoring callbacks (checkpoints) run last, once the epoch is marked finished: a checkpoint
        they write resumes in the next epoch, with all of this done.
        """
        progress = self.progress
        results = self._logging.results
        assert results is not None
        self._run.status.stage = RunningStage.TRAINING
        results.set_stage("train", reset=False)
        results.phase = EPOCH
        self.loss_check.check(self.raw_loss, progress.batches_done - 1)  # before the epoch's metrics and checkpoints
        self._hooks.call("on_train_epoch_end", monitoring=False)
        results.compute_epoch("train")
        if self._schedulers.has_plateau_epoch_interval:
            self._schedulers.step("epoch", progress.batches_done - 1, plateau=True)
        self._logging.log_epoch_metrics("train", max(progress.stepped_batches - 1, 0))
        progress.epoch_finished = True
        self._hooks.call("on_train_epoch_end", monitoring=True)
        results.reset_metric_objects("train")
        results.set_stage("train", reset=True)  # the next epoch starts with no values (those read so far are kept)
        self._next_epoch()


_NOTHING: Any = object()
