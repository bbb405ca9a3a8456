"""``TQDMProgressBar``: tqdm bars for training, validation, test and predict, quiet when nobody watches.

The bar costs next to nothing per step: when it is quiet (the output is not a terminal) a batch
hook returns after one attribute test; when it is shown, a batch is one ``tqdm.update(1)``, and
the loss and metrics are turned into numbers only when tqdm actually redraws (at most ten times
a second), so the device is not synchronised every step.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from typing_extensions import override

from torchplug.callbacks.progress import ProgressBar, _finite
from torchplug.trainer.states import TrainerFn

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["TQDMProgressBar"]


@functools.cache
def _bar_class() -> type[Any]:
    """tqdm, imported on first use, with a postfix computed only when the bar is drawn."""
    from tqdm import tqdm

    class _Bar(tqdm):  # type: ignore[misc]  # tqdm has no type hints: its class is Any
        monitor_interval = 0  # no background monitor thread

        def __init__(self, *args: Any, postfix_fn: Callable[[], dict[str, Any]] | None = None, **kwargs: Any) -> None:
            self._postfix_fn = postfix_fn
            super().__init__(*args, **kwargs)

        @property
        def format_dict(self) -> dict[str, Any]:
            if self._postfix_fn is not None:
                self.set_postfix(self._postfix_fn(), refresh=False)
            return super().format_dict  # type: ignore[no-any-return]  # tqdm has no type hints

        def close(self) -> None:
            # The last draw shows the values the epoch ended with: by the time a bar closes (the next
            # epoch, the end of fit) the epoch's step values are cleared, and a fresh postfix would drop them.
            self._postfix_fn = None
            super().close()

    return _Bar


class TQDMProgressBar(ProgressBar):
    """Progress bars drawn with tqdm on global rank 0: the Trainer's default bar.

    During ``fit`` one bar per training epoch shows ``step/total``, the speed (it/s), the time
    left, and in its postfix what :meth:`get_metrics` returns (the logger's version ``v_num`` and
    every metric logged with ``prog_bar=True``). Validation, the sanity check, test and predict
    get their own bars.

    The bars appear only when their stream (stdout) is a terminal, so logs of batch jobs stay
    clean; ``force=True`` or the environment variable ``TORCHPLUG_PROGRESS_BAR=1`` shows them
    anyway, ``force=False`` or ``TORCHPLUG_PROGRESS_BAR=0`` never.

    Example:
        >>> Trainer(callbacks=[TQDMProgressBar(refresh_rate=10)])

    Args:
        refresh_rate: Redraw at most every this many batches (and at most ten times a second);
            0 hides the bars.
        process_position: Draw the bars this many lines down, to stack them under another
            program's bars (as tqdm's ``position``).
        leave: Keep each finished epoch's bar on screen (a new line per epoch); False: one bar,
            reused.
        force: True: always show; False: never; None: only on a terminal (or as the environment
            variable says).
        stream: Where the bars go (default: ``sys.stdout`` at the start of each run).

    Attributes:
        train_bar: The tqdm bar of the training epoch, while one is shown (else None).
        eval_bar: The tqdm bar of validation, the sanity check, test or predict, while one is shown.
        train_progress_bar: The training bar of the last epoch, shown or not, kept after ``fit``.
    """

    def __init__(
        self,
        refresh_rate: int = 1,
        process_position: int = 0,
        leave: bool = False,
        force: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(
                f"TQDMProgressBar(refresh_rate={refresh_rate!r}): give an int >= 1, or 0 to hide the bars."
            )
        if isinstance(process_position, bool) or not isinstance(process_position, int) or process_position < 0:
            raise ValueError(f"TQDMProgressBar(process_position={process_position!r}): give an int >= 0.")
        super().__init__(force=force)
        self.refresh_rate = refresh_rate
        self.process_position = process_position
        self.leave = leave
        self._stream = stream
        self.train_bar: Any = None
        self.eval_bar: Any = None
        self._train_progress_bar: Any = None  # the last epoch's bar, kept once closed; a silent one when hidden

    # -- whether to show ------------------------------------------------------------------------

    @property
    def stream(self) -> TextIO:
        """The stream the bars are written to."""
        return self._stream if self._stream is not None else sys.stdout

    @property
    def train_progress_bar(self) -> Any:
        """The training bar (tqdm) of the epoch in progress or of the last one, as in Lightning; None before any.

        When the bars are hidden (the output is not a terminal, ``refresh_rate=0``, a rank other than
        0) it is a silent tqdm (``disable=True``): calls such as ``set_description`` and
        ``set_postfix`` do nothing, and its ``n`` is brought up to date at the end of each epoch.
        """
        return self._train_progress_bar

    @property
    def val_progress_bar(self) -> Any:
        """The validation (or sanity-check) bar, while one is shown."""
        return self.eval_bar

    @property
    def test_progress_bar(self) -> Any:
        """The test bar, while one is shown."""
        return self.eval_bar

    @property
    def predict_progress_bar(self) -> Any:
        """The predict bar, while one is shown."""
        return self.eval_bar

    @override
    def _output_is_terminal(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (ValueError, OSError):  # a closed or detached stream
            return False

    @override
    def _decide(self, trainer: Trainer) -> bool:
        return self.refresh_rate > 0 and super()._decide(trainer)

    @override
    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Close any bar still open."""
        self._close_all()

    @override
    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """Close the bars so the terminal is left clean."""
        self._close_all()

    @override
    def disable(self) -> None:
        """Stop drawing (closing the bars shown) until :meth:`enable`."""
        super().disable()
        self._close_all()

    def __getstate__(self) -> dict[str, Any]:
        """The state without the tqdm bars, which cannot be pickled (``ddp_spawn`` pickles the callbacks)."""
        return {**self.__dict__, "train_bar": None, "eval_bar": None, "_train_progress_bar": None}

    def _close_all(self) -> None:
        for bar in (self.eval_bar, self.train_bar):
            if bar is not None:
                bar.close()
        self.train_bar = self.eval_bar = None

    # -- the bars (override to change how they look) --------------------------------------------

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
            position=position + self.process_position,
            file=self.stream,
            dynamic_ncols=True,
            smoothing=0,
            mininterval=0.1,
            miniters=self.refresh_rate if self.refresh_rate > 1 else None,
        )

    def init_train_tqdm(self, trainer: Trainer) -> Any:
        """The bar of a training epoch (override to change it)."""
        module = trainer.lightning_module
        return self._new_bar(
            f"Epoch {trainer.current_epoch}",
            self.total_train_batches(trainer),
            leave=True,
            position=0,
            postfix=lambda: self.get_metrics(trainer, module),
        )

    def init_validation_tqdm(self, trainer: Trainer) -> Any:
        """The bar of a validation run."""
        return self._eval_bar("Validation", self.total_val_batches(trainer))

    def init_sanity_tqdm(self, trainer: Trainer) -> Any:
        """The bar of the sanity check."""
        return self._eval_bar("Sanity Checking", self.total_val_batches(trainer))

    def init_test_tqdm(self, trainer: Trainer) -> Any:
        """The bar of a test run."""
        return self._eval_bar("Testing", self.total_test_batches(trainer))

    def init_predict_tqdm(self, trainer: Trainer) -> Any:
        """The bar of a predict run."""
        return self._eval_bar("Predicting", self.total_predict_batches(trainer))

    def _eval_bar(self, desc: str, total: int | None) -> Any:
        nested = self.train_bar is not None
        return self._new_bar(desc, total, leave=not nested and self.leave, position=1 if nested else 0)

    # -- training -------------------------------------------------------------------------------

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Start (or reset) the epoch's bar, at the batch a resumed epoch continues from."""
        if not self.is_enabled:  # a silent bar for code that reads train_progress_bar; nothing per batch
            self._train_progress_bar = _bar_class()(
                disable=True, desc=f"Epoch {trainer.current_epoch}", total=self.total_train_batches(trainer)
            )
            self._train_progress_bar.n = trainer.fit_loop.progress.batches_done
            return
        if self.train_bar is None or self.leave:
            if self.train_bar is not None:
                self.train_bar.close()
            self.train_bar = self.init_train_tqdm(trainer)
        else:
            self.train_bar.set_description(f"Epoch {trainer.current_epoch}", refresh=False)
            self.train_bar.reset(total=self.total_train_batches(trainer))
        self._train_progress_bar = self.train_bar
        done = trainer.fit_loop.progress.batches_done
        if done:
            self.train_bar.update(done)

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Advance the bar by one batch (drawn only when tqdm's refresh interval has passed)."""
        bar = self.train_bar
        if bar is not None:
            bar.update(1)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Draw the epoch's final state (a silent bar's count is brought up to date)."""
        if self.train_bar is not None:
            self.train_bar.refresh()
        elif self._train_progress_bar is not None:
            self._train_progress_bar.n = trainer.fit_loop.progress.batches_done

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Close the training bar (kept as :attr:`train_progress_bar`)."""
        if self.train_bar is not None:
            self.train_bar.close()
            self.train_bar = None
        elif self._train_progress_bar is not None and trainer.fit_loop.progress.batches_done:
            self._train_progress_bar.n = trainer.fit_loop.progress.batches_done  # stopped in the middle of an epoch

    # -- evaluation -----------------------------------------------------------------------------

    @override
    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Open the validation (or sanity-check) bar."""
        if self.is_enabled:
            self._close_eval_bar()
            self.eval_bar = (
                self.init_sanity_tqdm(trainer) if trainer.sanity_checking else self.init_validation_tqdm(trainer)
            )

    @override
    def on_validation_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the validation bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    @override
    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Close the validation bar (during fit, refresh the training bar with the new metrics)."""
        self._close_eval_bar()
        if trainer.state.fn is not TrainerFn.VALIDATING and self.train_bar is not None:
            self.train_bar.refresh()  # show the new validation metrics

    @override
    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Open the test bar."""
        if self.is_enabled:
            self._close_eval_bar()
            self.eval_bar = self.init_test_tqdm(trainer)

    @override
    def on_test_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the test bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    @override
    def on_test_end(self, trainer: Trainer, module: Module) -> None:
        """Close the test bar."""
        self._close_eval_bar()

    @override
    def on_predict_start(self, trainer: Trainer, module: Module) -> None:
        """Open the predict bar."""
        if self.is_enabled:
            self._close_eval_bar()
            self.eval_bar = self.init_predict_tqdm(trainer)

    @override
    def on_predict_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Advance the predict bar."""
        bar = self.eval_bar
        if bar is not None:
            bar.update(1)

    @override
    def on_predict_end(self, trainer: Trainer, module: Module) -> None:
        """Close the predict bar."""
        self._close_eval_bar()

    def _close_eval_bar(self) -> None:
        if self.eval_bar is not None:
            self.eval_bar.close()
            self.eval_bar = None

    def __repr__(self) -> str:
        return (
            f"TQDMProgressBar(refresh_rate={self.refresh_rate}, process_position={self.process_position}, "
            f"leave={self.leave}, force={self.force})"
        )
