"""``ProgressBar``: tqdm bars for training, validation, test and predict, quiet when nobody watches.

The bar costs next to nothing per step: when it is quiet (the output is not a terminal) a batch
hook returns after one attribute test; when it is shown, a batch is one ``tqdm.update(1)``, and
the loss and metrics are turned into numbers only when tqdm actually redraws (at most ten times
a second), so the device is not synchronised every step.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from torchplug.callbacks.callback import Callback
from torchplug.trainer.states import TrainerFn
from torchplug.utilities.env_vars import env_bool

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["ProgressBar"]

#: Set to 1 to show the bars even when the output is not a terminal (0 hides them everywhere).
ENV_VAR = "TORCHPLUG_PROGRESS_BAR"


@functools.cache
def _bar_class() -> type[Any]:
    """tqdm, imported on first use, with a postfix computed only when the bar is drawn."""
    from tqdm import tqdm

    class _Bar(tqdm):  # type: ignore[misc]
        monitor_interval = 0  # no background monitor thread

        def __init__(self, *args: Any, postfix_fn: Callable[[], dict[str, Any]] | None = None, **kwargs: Any) -> None:
            self._postfix_fn = postfix_fn
            super().__init__(*args, **kwargs)

        @property
        def format_dict(self) -> dict[str, Any]:
            if self._postfix_fn is not None:
                self.set_postfix(self._postfix_fn(), refresh=False)
            return super().format_dict  # type: ignore[no-any-return]

    return _Bar


class ProgressBar(Callback):
    """Progress bars (tqdm) on global rank 0, and the results table after ``validate``/``test``.

    During ``fit`` one bar per training epoch shows ``step/total``, the speed (it/s), the time
    left, and in its postfix the last loss, the logger's version (``v_num``) and every metric
    logged with ``prog_bar=True``. Validation, the sanity check, test and predict get their own
    bars. After ``trainer.validate()`` and ``trainer.test()`` a table of the results is printed to
    stdout, even when the bars are quiet.

    The bars appear only when their stream (stdout) is a terminal, so logs of batch jobs stay
    clean; ``force=True`` or the environment variable ``TORCHPLUG_PROGRESS_BAR=1`` shows them
    anyway, ``force=False`` or ``TORCHPLUG_PROGRESS_BAR=0`` never.

    Args:
        refresh_rate: Redraw at most every this many batches (and at most ten times a second);
            0 hides the bars.
        leave: Keep each finished epoch's bar on screen (a new line per epoch); False: one bar,
            reused.
        force: True: always show; False: never; None: only on a terminal (or as the environment
            variable says).
        stream: Where the bars go (default: ``sys.stdout`` at the start of each run).

    Attributes:
        train_bar: The tqdm bar of the training epoch, while one is shown (else None).
        eval_bar: The tqdm bar of validation, the sanity check, test or predict, while one is shown.
    """

    def __init__(
        self, refresh_rate: int = 1, leave: bool = False, force: bool | None = None, stream: TextIO | None = None
    ) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(f"ProgressBar(refresh_rate={refresh_rate!r}): give an int >= 1, or 0 to hide the bars.")
        self.refresh_rate = refresh_rate
        self.leave = leave
        self.force = force
        self._stream = stream
        self._enabled = False
        self.train_bar: Any = None
        self.eval_bar: Any = None

    # -- whether to show ------------------------------------------------------------------------

    @property
    def stream(self) -> TextIO:
        """The stream the bars are written to."""
        return self._stream if self._stream is not None else sys.stdout

    @property
    def is_enabled(self) -> bool:
        """Whether bars are shown in the current run."""
        return self._enabled

    def _decide(self, trainer: Trainer) -> bool:
        if self.refresh_rate == 0 or not trainer.is_global_zero:
            return False
        if self.force is not None:
            return self.force
        setting = env_bool(ENV_VAR, None)  # a value other than on/off/unset raises, naming the variable
        if setting is not None:
            return setting
        isatty = getattr(self.stream, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (ValueError, OSError):  # a closed or detached stream
            return False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Decide once per run whether the bars are shown."""
        self._enabled = self._decide(trainer)

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Close any bar still open."""
        self._close_all()

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """Close the bars so the terminal is left clean."""
        self._close_all()

    def _close_all(self) -> None:
        for bar in (self.eval_bar, self.train_bar):
            if bar is not None:
                bar.close()
        self.train_bar = self.eval_bar = None

    def _new_bar(
        self,
        desc: str,
        total: float | None,
        leave: bool,
        position: int,
        postfix: Callable[[], dict[str, Any]] | None = None,
    ) -> Any:
        return _bar_class()(
            postfix_fn=postfix,
            desc=desc,
            total=_finite(total),
            leave=leave,
            position=position,
            file=self.stream,
            dynamic_ncols=True,
            smoothing=0,
            mininterval=0.1,
            miniters=self.refresh_rate if self.refresh_rate > 1 else None,
        )

    # -- training -------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Start (or reset) the epoch's bar, at the batch a resumed epoch continues from."""
        if not self._enabled:
            return
        total = trainer.num_training_batches
        desc = f"Epoch {trainer.current_epoch}"
        if self.train_bar is None or self.leave:
            if self.train_bar is not None:
                self.train_bar.close()
            self.train_bar = self._new_bar(
                desc, total, leave=True, position=0, postfix=lambda: self._train_postfix(trainer)
            )
        else:
            self.train_bar.set_description(desc, refresh=False)
            self.train_bar.reset(total=_finite(total))
        done = trainer.fit_loop.progress.batches_done
        if done:
            self.train_bar.update(done)

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Advance the bar by one batch (drawn only when tqdm's refresh interval has passed)."""
        bar = self.train_bar
        if bar is not None:
            bar.update(1)

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Draw the epoch's final state."""
        if self.train_bar is not None:
            self.train_bar.refresh()

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Close the training bar."""
        if self.train_bar is not None:
            self.train_bar.close()
            self.train_bar = None

    def _train_postfix(self, trainer: Trainer) -> dict[str, Any]:
        postfix: dict[str, Any] = {}
        loss = trainer.fit_loop.last_loss
        if loss is not None:
            postfix["loss"] = f"{float(loss):.4g}"
        logger = trainer.logger
        if logger is not None:
            postfix["v_num"] = logger.version
        for name, value in trainer.progress_bar_metrics.items():
            postfix[name] = f"{value:.4g}"
        return postfix

    # -- evaluation -----------------------------------------------------------------------------

    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Open the validation (or sanity-check) bar."""
        if self._enabled:
            desc = "Sanity Checking" if trainer.sanity_checking else "Validation"
            self._open_eval_bar(desc, _validation_total(trainer))

    def on_validation_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the validation bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Close the validation bar (during fit, refresh the training bar with the new metrics)."""
        self._close_eval_bar()
        if trainer.state.fn is not TrainerFn.VALIDATING and self.train_bar is not None:
            self.train_bar.refresh()  # show the new validation metrics

    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Open the test bar."""
        if self._enabled:
            self._open_eval_bar("Testing", _total(getattr(trainer, "num_test_batches", None)))

    def on_test_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the test bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    def on_test_end(self, trainer: Trainer, module: Module) -> None:
        """Close the test bar."""
        self._close_eval_bar()

    def on_predict_start(self, trainer: Trainer, module: Module) -> None:
        """Open the predict bar."""
        if self._enabled:
            self._open_eval_bar("Predicting", _total(getattr(trainer, "num_predict_batches", None)))

    def on_predict_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the predict bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    def on_predict_end(self, trainer: Trainer, module: Module) -> None:
        """Close the predict bar."""
        self._close_eval_bar()

    def _open_eval_bar(self, desc: str, total: float | None) -> None:
        self._close_eval_bar()
        nested = self.train_bar is not None
        self.eval_bar = self._new_bar(desc, total, leave=not nested and self.leave, position=1 if nested else 0)

    def _close_eval_bar(self) -> None:
        if self.eval_bar is not None:
            self.eval_bar.close()
            self.eval_bar = None

    def __repr__(self) -> str:
        return f"ProgressBar(refresh_rate={self.refresh_rate}, leave={self.leave}, force={self.force})"


def _finite(total: float | None) -> int | None:
    return None if total is None or math.isinf(total) else int(total)


def _total(counts: Any) -> float | None:
    if counts is None:
        return None
    total = sum(counts) if isinstance(counts, (list, tuple)) else counts
    return _finite(float(total)) if total else None


def _validation_total(trainer: Trainer) -> float | None:
    counts = list(trainer.num_val_batches)
    if trainer.sanity_checking:
        steps = trainer.num_sanity_val_steps
        counts = [n if steps == -1 else min(steps, n) for n in counts]
    return _total(counts)
