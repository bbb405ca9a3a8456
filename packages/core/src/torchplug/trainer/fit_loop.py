"""The training loop: epochs of batches, validation when due, and an exact resume from any checkpoint.

The per-batch path is the product's headline cost, so it is written flat: hooks that nobody
overrides are never called, nothing is converted to a Python number, and the progress counters
are plain attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from torchplug.trainer.checkpointing import gradients_of, load_gradients
from torchplug.trainer.states import FitProgress, RunningStage
from torchplug.utilities.seed import capture_rng_states, restore_rng_states

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["FitLoop"]


def _loss_of(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        return output.get("loss")
    if output is None:
        return None
    raise TypeError(
        f"training_step returned {type(output).__name__}; return the loss tensor, a dict with 'loss', "
        "or None to skip the batch."
    )


def _skip(iterator: Iterator[Any], count: int) -> None:
    """Advance a fresh dataloader iterator by ``count`` batches, without loading them when possible."""
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    if sampler_iter is not None and getattr(iterator, "_num_workers", 1) == 0:
        # Single-process DataLoader: skipping indices is exact and skips the loading cost.
        for _ in range(count):
            next(sampler_iter)
        iterator._num_yielded += count  # type: ignore[attr-defined]
        return
    for _ in range(count):
        next(iterator)


class FitLoop:
    """Runs ``fit``: epochs, batches, optimizer steps, validation, and the epoch-end work.

    Args:
        trainer: The Trainer that owns the loop.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.progress = FitProgress()
        self._resume_rng: dict[str, Any] | None = None
        self._resume_gradients: list[torch.Tensor | None] | None = None
        self._since_step = 0  # batches accumulated since the last optimizer step
        self._epoch_validated = False
        self._last_loss: torch.Tensor | None = None

    # -- state ------------------------------------------------------------------------------------

    @property
    def last_loss(self) -> torch.Tensor | None:
        """The loss of the last training batch (detached), for the progress bar."""
        return None if self._last_loss is None else self._last_loss.detach()

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
        self._since_step = self.progress.batches_done % self.trainer.batches_per_optimizer_step

    def mark_validated(self) -> None:
        """Record that the validation due after the last batch has run (a checkpoint from now on resumes past it)."""
        self.progress.tail_done = True

    def accumulated_gradients(self) -> list[torch.Tensor | None] | None:
        """The gradients accumulated since the last optimizer step, when a checkpoint falls in the middle."""
        if self._since_step == 0:
            return None
        return gradients_of(self.trainer.module)

    def _next_epoch(self) -> None:
        progress = self.progress
        progress.epoch += 1
        progress.batches_done = 0
        progress.tail_done = True
        progress.epoch_finished = False
        progress.epoch_rng = None

    # -- the loop ---------------------------------------------------------------------------------

    def done(self) -> bool:
        """Whether training should end now (max_steps, max_epochs, or a stop request past the minimums)."""
        t, p = self.trainer, self.progress
        if t.max_steps != -1 and p.global_step >= t.max_steps:
            return True
        if t.max_epochs is not None and t.max_epochs != -1 and p.epoch >= t.max_epochs:
            return True
        if t.should_stop:
            enough_epochs = t.min_epochs is None or p.epoch >= t.min_epochs
            enough_steps = t.min_steps is None or p.global_step >= t.min_steps
            return enough_epochs and enough_steps
        return False

    def run(self) -> None:
        """Train until :meth:`done`."""
        t = self.trainer
        t._call_hooks("on_train_start")
        while not self.done():
            self.run_epoch()
            if t._stop_now:
                break
        t._call_hooks("on_train_end")

    def run_epoch(self) -> None:
        """One epoch (or the rest of one, when resuming), then the epoch-end work."""
        t, p = self.trainer, self.progress
        t.state.stage = RunningStage.TRAINING
        resuming = p.batches_done > 0
        t._results.set_stage("train", reset=not resuming)
        t.module.train()
        self._epoch_validated = False
        t._call_hooks("on_train_epoch_start")
        iterator = self._epoch_iterator()
        if resuming and not p.tail_done and self._tail(p.batches_done - 1, p.batches_done >= t.num_training_batches):
            return
        self._run_batches(iterator)
        if not t._stop_now:
            self._epoch_end()

    def _epoch_iterator(self) -> Iterator[Any]:
        t, p = self.trainer, self.progress
        loader = t._train_loader
        if p.epoch_rng is None:
            if self._resume_rng is not None:  # resuming at an epoch boundary
                restore_rng_states(self._resume_rng)
                self._resume_rng = None
            p.epoch_rng = capture_rng_states()
        else:
            restore_rng_states(p.epoch_rng)
        set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
        if callable(set_epoch):  # DistributedSampler and friends reshuffle per epoch
            set_epoch(p.epoch)
        iterator: Iterator[Any] = iter(loader)
        if p.batches_done:
            _skip(iterator, p.batches_done)
        if self._resume_rng is not None:
            restore_rng_states(self._resume_rng)
            self._resume_rng = None
        if self._resume_gradients is not None:
            load_gradients(t.module, self._resume_gradients)
            self._resume_gradients = None
        return iterator

    def _run_batches(self, iterator: Iterator[Any]) -> None:
        t, p = self.trainer, self.progress
        limit = t.num_training_batches
        batch_idx = p.batches_done
        step = self._batch_step()
        tail = self._tail_step()
        while batch_idx < limit:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            is_last = batch_idx + 1 >= limit
            if step(batch, batch_idx, is_last) is False:
                break  # on_train_batch_start returned -1: end the epoch now
            batch_idx += 1
            if tail(batch_idx - 1, is_last):
                return

    def _batch_step(self) -> Callable[[Any, int, bool], bool | None]:
        """Build the per-batch function once per epoch, binding only the hooks somebody overrides."""
        t, p = self.trainer, self.progress
        module = t.module
        results = t._results
        accumulate = t.batches_per_optimizer_step
        on_start = t._hook_list("on_train_batch_start", (module.on_train_batch_start,))
        on_end = t._hook_list("on_train_batch_end", (module.on_train_batch_end,))
        batch_to_device = t.strategy.batch_to_device
        train_step = self._automatic_step() if module.automatic_optimization else self._manual_step

        def step(batch: Any, batch_idx: int, is_last: bool) -> bool | None:
            batch = batch_to_device(batch)
            results.new_batch(batch)
            results.defaults = (True, False)
            for hook in on_start:
                if hook(batch, batch_idx) == -1:
                    return False
            self._since_step += 1
            should_step = self._since_step >= accumulate or is_last
            outputs = train_step(batch, batch_idx, should_step)
            p.batches_done = batch_idx + 1
            p.total_batches += 1
            p.tail_done = False
            for hook in on_end:
                hook(outputs, batch, batch_idx)
            results.defaults = (False, True)
            return None

        return step

    def _automatic_step(self) -> Callable[[Any, int, bool], Any]:
        """Build the function that runs one batch's forward, backward and (when due) optimizer step."""
        t = self.trainer
        strategy, module = t.strategy, t.module
        optimizer = t.optimizers[0]
        accumulate = t.batches_per_optimizer_step
        clip_val, clip_algorithm = t.gradient_clip_val, t.gradient_clip_algorithm
        before_backward = t._hook_list("on_before_backward", (module.on_before_backward,))
        after_backward = t._hook_list("on_after_backward", (module.on_after_backward,))
        before_step = t._hook_list("on_before_optimizer_step", (module.on_before_optimizer_step,))
        after_step = self._after_optimizer_step
        training_step, backward, optimizer_step = strategy.training_step, strategy.backward, strategy.optimizer_step

        def run(batch: Any, batch_idx: int, should_step: bool) -> Any:
            outputs: list[Any] = [None]

            def closure() -> torch.Tensor | None:
                output = outputs[0] = training_step(batch, batch_idx)
                loss = _loss_of(output)
                if loss is None:
                    return None
                for hook in before_backward:
                    hook(loss)
                backward(loss / accumulate if accumulate > 1 else loss, optimizer)
                for hook in after_backward:
                    hook()
                self._last_loss = loss  # detached only when read: one op less per step
                return loss

            if not should_step:
                with strategy.no_backward_sync(True):
                    closure()
                return outputs[0]

            def step_closure() -> torch.Tensor | None:
                loss = closure()
                if clip_val:
                    strategy.clip_gradients(optimizer, clip_val, clip_algorithm)
                for hook in before_step:
                    hook(optimizer)
                return loss

            optimizer_step(optimizer, step_closure)
            if outputs[0] is None or _loss_of(outputs[0]) is None:  # training_step skipped this batch
                self._since_step = 0
                optimizer.zero_grad(set_to_none=True)
                return outputs[0]
            after_step(optimizer)
            return outputs[0]

        return run

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        t = self.trainer
        for hook in t._hook_list("on_before_zero_grad", (t.module.on_before_zero_grad,)):
            hook(optimizer)
        optimizer.zero_grad(set_to_none=True)
        self._since_step = 0
        self.progress.global_step += 1
        if t._step_schedulers:
            t._update_schedulers("step")

    def _manual_step(self, batch: Any, batch_idx: int, should_step: bool) -> Any:
        output = self.trainer.strategy.training_step(batch, batch_idx)
        loss = _loss_of(output) if isinstance(output, (torch.Tensor, dict)) else None
        if loss is not None:
            self._last_loss = loss.detach()
        self._since_step = 0
        return output

    # -- between batches ----------------------------------------------------------------------------

    def _tail_step(self) -> Callable[[int, bool], bool]:
        """Build :meth:`_tail` for this epoch, with what cannot change during it looked up once."""
        t = self.trainer
        has_loggers = bool(t._loggers)
        may_validate = bool(t._val_loaders) and any(t.num_val_batches)

        def tail(batch_idx: int, is_last: bool) -> bool:
            return self._tail(batch_idx, is_last, has_loggers, may_validate)

        return tail

    def _tail(self, batch_idx: int, is_last: bool, has_loggers: bool = True, may_validate: bool = True) -> bool:
        """Work after a finished batch: logging, validation when due, preemption, stop checks.

        Returns True when training must stop now.
        """
        t, p = self.trainer, self.progress
        if has_loggers and t._loggers and p.global_step % t.log_every_n_steps == 0:
            t._log_step_metrics()
        if may_validate and t._should_validate(p.batches_done, is_last):
            t._run_validation()
            if is_last:
                self._epoch_validated = True
        p.tail_done = True
        if t._watch_preemption and self._since_step == 0 and t._preemption_requested():
            t._handle_preemption()
            return True
        if t.max_steps != -1 and p.global_step >= t.max_steps:
            return True
        return t.should_stop and self.done()

    def _epoch_end(self) -> None:
        t, p = self.trainer, self.progress
        if self._since_step:  # a loader without a length ended mid-accumulation: step what we have
            optimizer = t.optimizers[0] if t.module.automatic_optimization else None
            if optimizer is not None:
                t.strategy.optimizer_step(optimizer, None)
                self._after_optimizer_step(optimizer)
        if (
            not self._epoch_validated
            and t._should_validate(p.batches_done, True)
            and math.isinf(t.num_training_batches)
        ):
            t._run_validation()
        t.state.stage = RunningStage.TRAINING
        t._results.set_stage("train", reset=False)
        t._call_hooks("on_train_epoch_end", monitoring=False)
        t._results.compute_epoch("train")
        t._log_epoch_metrics("train")
        t._update_schedulers("epoch")
        p.epoch_finished = True
        t._call_hooks("on_train_epoch_end", monitoring=True)
        self._next_epoch()
