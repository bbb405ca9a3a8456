"""The batch size search: the largest batch size whose training steps do not run out of memory.

:func:`scale_batch_size` runs inside a fit (from a callback's hook, once the optimizers exist):
it saves a checkpoint, sets the module's (or DataModule's) ``batch_size``, rebuilds the
dataloaders and trains ``steps_per_trial`` steps, growing the size until a step runs out of
memory or one batch covers the training set (no size is larger than the training set); then it
restores everything from the checkpoint but the size found, with which the dataloaders are built
once more.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Sized
from typing import TYPE_CHECKING

import torch

from torchplug._errors import MisconfigurationError
from torchplug.tuner._attributes import get_attr, has_attr, set_attr
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torchplug.utilities.seed import capture_rng_states, restore_rng_states

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["MODES", "is_oom_error", "scale_batch_size"]

MODES = ("power", "binsearch")

#: Messages of allocation failures that torch raises as a plain RuntimeError.
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "CUDNN_STATUS_NOT_SUPPORTED")


def is_oom_error(exception: BaseException) -> bool:
    """Whether ``exception`` says a device (or the host) ran out of memory."""
    if isinstance(exception, torch.OutOfMemoryError):
        return True
    return isinstance(exception, RuntimeError) and any(text in str(exception) for text in _OOM_MESSAGES)


def free_memory() -> None:
    """Collect garbage and empty the current accelerator's cache (asking torch, whatever the device)."""
    gc.collect()
    if torch.accelerator.is_available():
        torch.accelerator.empty_cache()


class _Search:
    """One search: sets sizes, runs trials from the same starting point, remembers what the Trainer had."""

    def __init__(self, trainer: Trainer, module: Module, name: str, steps: int, max_val: int) -> None:
        self.trainer = trainer
        self.module = module
        self.name = name
        self.steps = steps
        self.max_val = max_val
        self.start = trainer.fit_loop.state_dict()

    @property
    def size(self) -> int:
        return int(get_attr(self.module, self.name, self.trainer))

    def samples(self) -> int | None:
        """The training set's length, once its loader is built (None before, or for a dataset without one)."""
        dataset = getattr(self.trainer.train_dataloader, "dataset", None)
        return len(dataset) if isinstance(dataset, Sized) else None

    def covers_the_data(self, size: int) -> bool:
        """Whether one batch of ``size`` holds the whole training set: no larger size is worth a trial."""
        samples = self.samples()
        return samples is not None and size >= samples

    def set(self, size: int, why: str | None = None) -> tuple[int, bool]:
        """Set the batch size (at most ``max_val`` and the training set's length) and rebuild the loaders.

        Returns the size set and whether it changed; when the current size already covers the
        training set, a larger one is not set (unchanged).
        """
        current = self.size
        if why is not None and size > current and self.covers_the_data(current):
            rank_zero_info(f"Batch size {current} covers the {self.samples()} training samples: the search ends there.")
            return current, False
        if size > self.max_val:
            rank_zero_info(f"Batch size {size} exceeds max_val={self.max_val}: {self.max_val} is tried instead.")
            size = self.max_val
        size = self._at_most_the_data(max(size, 1))
        if why is not None:
            rank_zero_info(f"Batch size {current} {why}, trying batch size {size}")
        self._apply(size)
        first = self._at_most_the_data(size)  # before the first loaders, the training set's length was unknown
        if first != size:
            size = first
            self._apply(size)
        return size, size != current

    def _at_most_the_data(self, size: int) -> int:
        samples = self.samples()
        if samples is not None and size > samples:
            rank_zero_info(f"Batch size {size} exceeds the {samples} training samples: {samples} is tried instead.")
            return samples
        return size

    def _apply(self, size: int) -> None:
        set_attr(self.module, self.name, size, self.trainer)
        self.trainer.fit_loop.reload_dataloaders()

    def trial(self) -> bool:
        """Train ``steps`` steps at the current size from the saved starting point; False when memory ran out."""
        free_memory()
        trainer = self.trainer
        trainer.fit_loop.restore(self.start, None, None)
        trainer.should_stop = False
        trainer.max_steps = trainer.global_step + self.steps
        try:
            trainer.fit_loop.run()
        except RuntimeError as exc:
            if not is_oom_error(exc):
                raise
            free_memory()
            return False
        return True


def _refuse_one(size: int) -> None:
    if size <= 1:
        raise MisconfigurationError(
            "The batch size finder ran out of memory with a batch size of 1: the model does not fit at all. Hint: "
            "a smaller model, a lower precision (precision='bf16-mixed'), or a sharded strategy."
        )


def _power(search: _Search, max_trials: int) -> int:
    """Double the size until a trial runs out of memory; return the last size that fit."""
    fitted: int | None = None
    for trial in range(max_trials):
        size = search.size
        if not search.trial():
            if fitted is not None:  # back to the last size that fit (also when the doubling was capped)
                search.set(fitted, "failed")
                return fitted
            _refuse_one(size)
            search.set(size // 2, "failed")
            continue
        fitted = size
        if trial + 1 >= max_trials or size >= search.max_val:
            return size
        _, changed = search.set(size * 2, "succeeded")
        if not changed:
            return size
    raise MisconfigurationError(
        f"The batch size finder found no batch size that fits within max_trials={max_trials} (the last tried, "
        f"{search.size}, ran out of memory). Hint: a smaller init_val, or more max_trials."
    )


def _binsearch(search: _Search, max_trials: int, margin: float) -> int:
    """Double until a trial runs out of memory, then bisect between the last fit and the failure."""
    low, high = 1, None
    trials = 0
    while True:
        size = search.size
        if not search.trial():
            _refuse_one(size)
            high = size
            size, _ = search.set((high + low) // 2, "failed")
            if high - low <= 1:
                break
            continue
        low = size
        trials += 1
        if trials >= max_trials or size >= search.max_val:
            break
        if high is not None:
            if high - low <= 1:
                break
            _, changed = search.set((high + low) // 2, "succeeded")
        else:
            _, changed = search.set(size * 2, "succeeded")
        if not changed:
            break
    size = search.size
    if search.covers_the_data(size):  # memory never ran out up to the whole training set: no edge to keep off
        return size
    reduced = max(1, int(size * (1 - margin)))
    if reduced != size:
        rank_zero_info(f"Applying a margin of {margin:.1%}: batch size {size} becomes {reduced}.")
        set_attr(search.module, search.name, reduced, search.trainer)
    return reduced


def scale_batch_size(
    trainer: Trainer,
    module: Module,
    mode: str = "power",
    steps_per_trial: int = 3,
    init_val: int = 2,
    max_trials: int = 25,
    batch_arg_name: str = "batch_size",
    margin: float = 0.05,
    max_val: int = 8192,
) -> int | None:
    """Search the batch size inside the current fit and put the fit back as it was but for the size found.

    Args:
        trainer: The Trainer, inside ``fit`` with its optimizers set up.
        module: The module being fit.
        mode: ``"power"`` doubles until memory runs out; ``"binsearch"`` then bisects.
        steps_per_trial: Optimizer steps per trial.
        init_val: The first size tried.
        max_trials: At most this many successful trials.
        batch_arg_name: The attribute (or hyperparameter) of the module or DataModule that the
            dataloader hooks read.
        margin: ``binsearch`` only: give back this fraction of the size found, as a safety margin
            (not when the size found covers the whole training set: memory never ran out).
        max_val: Never try more than this. Nor more than the training set's length (when its
            dataset has one): a batch that covers it ends the search.

    Returns:
        The size found (set on the module or DataModule), or None under ``fast_dev_run``.

    Raises:
        MisconfigurationError: Several processes, loaders passed to ``fit()`` directly, no such
            attribute, or arguments out of range.
    """
    if trainer.fast_dev_run:
        rank_zero_warn("The batch size finder is skipped under fast_dev_run.")
        return None
    _check(
        trainer,
        module,
        mode=mode,
        steps_per_trial=steps_per_trial,
        init_val=init_val,
        max_trials=max_trials,
        batch_arg_name=batch_arg_name,
        margin=margin,
        max_val=max_val,
    )
    path = os.path.join(trainer.default_root_dir, f".scale_batch_size_{uuid.uuid4()}.ckpt")
    rng = (capture_rng_states(), trainer.accelerator.get_rng_state())
    trainer.save_checkpoint(path)
    saved = (
        trainer.callbacks,
        trainer.loggers,
        trainer.max_steps,
        trainer.limit_train_batches,
        trainer.limit_val_batches,
    )
    search = _Search(trainer, module, batch_arg_name, steps_per_trial, max_val)
    try:
        trainer.callbacks = []
        trainer.loggers = []
        trainer.limit_train_batches = 1.0
        trainer.limit_val_batches = steps_per_trial
        search.set(init_val)
        size = _power(search, max_trials) if mode == "power" else _binsearch(search, max_trials, margin)
        free_memory()
        rank_zero_info(f"Finished the batch size search: the fit continues with batch size {size}.")
    finally:
        trainer.callbacks, trainer.loggers, trainer.max_steps = saved[:3]
        trainer.limit_train_batches, trainer.limit_val_batches = saved[3:]
        trainer.restore_checkpoint(path)
        trainer.strategy.remove_checkpoint(path)
        trainer.fit_loop.restore(trainer.fit_loop.state_dict(), None, None)
        restore_rng_states(rng[0])
        trainer.accelerator.set_rng_state(rng[1])
        trainer.fit_loop.reload_dataloaders()  # with the size found (or the last one tried, after an error)
    return size


def _check(
    trainer: Trainer,
    module: Module,
    mode: str,
    steps_per_trial: int,
    init_val: int,
    max_trials: int,
    batch_arg_name: str,
    margin: float,
    max_val: int,
) -> None:
    if mode not in MODES:
        raise MisconfigurationError(f"scale_batch_size(mode={mode!r}): choose 'power' or 'binsearch'.")
    for name, value in (
        ("steps_per_trial", steps_per_trial),
        ("init_val", init_val),
        ("max_trials", max_trials),
        ("max_val", max_val),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MisconfigurationError(f"scale_batch_size({name}={value!r}): give an int >= 1.")
    if not 0.0 <= margin < 1.0:
        raise MisconfigurationError(f"scale_batch_size(margin={margin!r}): give a fraction in [0, 1).")
    if trainer.world_size > 1:
        raise MisconfigurationError(
            f"The batch size finder runs in one process; this Trainer runs {trainer.world_size}. Hint: find the size "
            "with devices=1, then train with it on several devices."
        )
    if not has_attr(module, batch_arg_name, trainer):
        raise MisconfigurationError(
            f"The batch size finder sets {batch_arg_name!r}, but neither {type(module).__name__}, its hparams nor the "
            "DataModule has it. Hint: read self.batch_size in train_dataloader(), or pass batch_arg_name=..."
        )
