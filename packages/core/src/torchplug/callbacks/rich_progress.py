"""``RichProgressBar``: progress bars drawn with rich (an optional extra: ``pip install 'core[rich]'``).

The display is refreshed by the training thread itself (no rich refresh thread), at most
``refresh_per_second`` times a second and every ``refresh_rate`` batches: a batch in between
costs an integer increment and one clock read, and the metrics are read (and the device
synchronised for the loss) only when the bar is drawn.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug.callbacks._rich import require_rich
from torchplug.callbacks.progress import ProgressBar
from torchplug.utilities.annotations import RealSignature

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["RichProgressBar", "RichProgressBarTheme"]


@dataclass
class RichProgressBarTheme:
    """The styles of :class:`RichProgressBar` (any rich style: ``"bold red"``, ``"#6206E0"``...).

    Attributes:
        description: The stage and epoch text.
        progress_bar: The bar while in progress.
        progress_bar_finished: The bar once complete.
        progress_bar_pulse: The bar of a stage whose total is unknown.
        batch_progress: The ``done/total`` batch count.
        time: Elapsed and remaining time.
        processing_speed: Batches per second.
        metrics: The metrics text.
        metrics_text_delimiter: Between two metrics.
        metrics_format: The format of numeric metrics.
    """

    description: str = "white"
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = "white"
    time: str = "grey54"
    processing_speed: str = "grey70"
    metrics: str = "white"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"

    __signature__ = RealSignature()  # inspect.signature shows real types (utilities/annotations.py)


class RichProgressBar(ProgressBar):
    """Progress bars drawn with rich on global rank 0: one per training epoch, validation, test and predict.

    Each bar shows the stage (``Epoch 3/9``: the epoch and the last one ``max_epochs`` allows),
    ``done/total`` batches, elapsed and remaining time and the speed; the training bar also what
    :meth:`get_metrics` returns (``v_num`` and every metric logged with ``prog_bar=True``). As the
    tqdm bar, it draws only when its console is a terminal, unless ``force=True`` (or
    ``TORCHPLUG_PROGRESS_BAR=1``).

    Example:
        >>> Trainer(callbacks=[RichProgressBar(leave=True)])

    Args:
        refresh_rate: Draw at most every this many batches; 0 hides the bars.
        leave: Keep every finished epoch's bar on screen (else one bar, reused).
        theme: The styles (:class:`RichProgressBarTheme`).
        console_kwargs: Arguments of the ``rich.console.Console`` the bars are drawn on
            (``{"file": stream, "force_terminal": True, "width": 120}``...).
        refresh_per_second: Draw at most this many times a second.
        force: True: always show; False: never; None: only on a terminal.

    Raises:
        ModuleNotFoundError: rich is not installed (``pip install 'core[rich]'``).
    """

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
        refresh_per_second: float = 10.0,
        force: bool | None = None,
    ) -> None:
        require_rich("RichProgressBar")
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(
                f"RichProgressBar(refresh_rate={refresh_rate!r}): give an int >= 1, or 0 to hide the bars."
            )
        if refresh_per_second <= 0:
            raise ValueError(f"RichProgressBar(refresh_per_second={refresh_per_second!r}): give a number > 0.")
        super().__init__(force=force)
        self.refresh_rate = refresh_rate
        self.leave = leave
        self.theme = theme if theme is not None else RichProgressBarTheme()
        self.console_kwargs = dict(console_kwargs or {})
        self._interval = 1.0 / refresh_per_second
        self._console: Any = None
        self._progress: Any = None
        self._trainer: Trainer | None = None
        self.train_task: Any = None  # rich TaskIDs, while the bars are shown
        self.eval_task: Any = None
        self._pending = 0  # batches done since the last draw
        self._eval_pending = 0
        self._last_draw = 0.0

    @property
    def console(self) -> Any:
        """The rich Console the bars are drawn on (made on first use from ``console_kwargs``)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self.console_kwargs)
        return self._console

    @property
    def progress(self) -> Any:
        """The ``rich.progress.Progress`` of the current run, while bars are shown (else None)."""
        return self._progress

    @override
    def _output_is_terminal(self) -> bool:
        return bool(self.console.is_terminal)

    @override
    def _decide(self, trainer: Trainer) -> bool:
        return self.refresh_rate > 0 and super()._decide(trainer)

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Decide once per run whether the bars are shown."""
        super().setup(trainer, module, stage)
        self._trainer = trainer

    @override
    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Stop the display."""
        self._stop()

    @override
    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """Stop the display so the terminal is left clean."""
        self._stop()

    @override
    def disable(self) -> None:
        """Stop drawing (and the display) until :meth:`enable`."""
        super().disable()
        self._stop()

    # -- the display ----------------------------------------------------------------------------

    def _start(self) -> Any:
        if self._progress is None:
            from rich.progress import BarColumn, Progress, TextColumn

            theme = self.theme
            batches, times, speed = _columns()
            self._progress = Progress(
                TextColumn("[progress.description]{task.description}", style=theme.description),
                BarColumn(
                    complete_style=theme.progress_bar,
                    finished_style=theme.progress_bar_finished,
                    pulse_style=theme.progress_bar_pulse,
                ),
                batches(theme.batch_progress),
                times(theme.time),
                speed(theme.processing_speed),
                TextColumn("{task.fields[metrics]}", style=theme.metrics),
                console=self.console,
                auto_refresh=False,  # drawn by the training thread, see the module docstring
            )
            self._progress.start()
        return self._progress

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self.train_task = self.eval_task = None

    def _draw(self, read_metrics: bool = True) -> None:
        self._last_draw = time.monotonic()
        progress = self._progress
        if progress is None:
            return
        if self.train_task is not None:
            trainer = self._trainer
            assert trainer is not None
            if read_metrics:
                progress.update(self.train_task, advance=self._pending, metrics=self._metrics_text(trainer))
            else:
                progress.update(self.train_task, advance=self._pending)
            self._pending = 0
        if self.eval_task is not None:
            progress.update(self.eval_task, advance=self._eval_pending)
            self._eval_pending = 0
        progress.refresh()

    def _due(self, batch_idx: int, total: int | None) -> bool:
        if total is not None and batch_idx + 1 >= total:
            return True
        return (batch_idx + 1) % self.refresh_rate == 0 and time.monotonic() - self._last_draw >= self._interval

    def _metrics_text(self, trainer: Trainer) -> str:
        theme = self.theme
        items = []
        for name, value in self.get_metrics(trainer, trainer.lightning_module).items():
            if isinstance(value, float):
                value = format(value, theme.metrics_format)
            items.append(f"{name}: {value}")
        return theme.metrics_text_delimiter.join(items)

    # -- training -------------------------------------------------------------------------------

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Start (or reset) the epoch's bar, at the batch a resumed epoch continues from."""
        if not self.is_enabled:
            return
        progress = self._start()
        total = self.total_train_batches(trainer)
        description = f"Epoch {trainer.current_epoch}"
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            description += f"/{trainer.max_epochs - 1}"  # the last epoch's number, as Lightning's rich bar says
        if self.train_task is None or self.leave:
            if self.train_task is not None:
                progress.update(self.train_task, advance=self._pending)
            self.train_task = progress.add_task(description, total=total, metrics="")
        else:
            progress.reset(self.train_task, total=total, description=description, metrics="")
        self._pending = trainer.fit_loop.progress.batches_done
        self._draw()

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the batch; draw when due."""
        if self.train_task is None:
            return
        self._pending += 1
        if self._due(batch_idx, self.total_train_batches(trainer)):
            self._draw()

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Draw the epoch's final state."""
        if self.train_task is not None:
            self._draw()

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Stop the display, the training bar showing the values its last epoch ended with."""
        if self.train_task is not None:
            self._draw(read_metrics=False)  # the epoch's step values are cleared by now
        self._stop()

    # -- evaluation -----------------------------------------------------------------------------

    def _open_eval(self, description: str, total: int | None) -> None:
        if not self.is_enabled:
            return
        progress = self._start()
        if self.eval_task is not None:  # a run of the same stage that did not end (an exception was caught)
            progress.remove_task(self.eval_task)
        self.eval_task = progress.add_task(description, total=total, metrics="")
        self._eval_pending = 0
        self._draw()

    def _eval_batch(self, batch_idx: int, total: int | None) -> None:
        if self.eval_task is None:
            return
        self._eval_pending += 1
        if self._due(batch_idx, total):
            self._draw()

    def _close_eval(self) -> None:
        progress = self._progress
        if self.eval_task is not None and progress is not None:
            self._draw()
            if self.train_task is not None:  # nested in fit: the validation bar goes away
                progress.remove_task(self.eval_task)
            self.eval_task = None
        if self.train_task is None:  # validate/test/predict on their own: stop, so results print below
            self._stop()

    @override
    def on_validation_start(self, trainer: Trainer, module: Module) -> None:
        """Open the validation (or sanity-check) bar."""
        description = "Sanity Checking" if trainer.sanity_checking else "Validation"
        self._open_eval(description, self.total_val_batches(trainer))

    @override
    def on_validation_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Count the batch; draw when due."""
        if self.eval_task is not None:
            self._eval_batch(batch_idx, self.total_val_batches(trainer))

    @override
    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Close the validation bar (during fit, the training bar shows the new metrics)."""
        self._close_eval()

    @override
    def on_test_start(self, trainer: Trainer, module: Module) -> None:
        """Open the test bar."""
        self._open_eval("Testing", self.total_test_batches(trainer))

    @override
    def on_test_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Count the batch; draw when due."""
        if self.eval_task is not None:
            self._eval_batch(batch_idx, self.total_test_batches(trainer))

    @override
    def on_test_end(self, trainer: Trainer, module: Module) -> None:
        """Close the test bar."""
        self._close_eval()

    @override
    def on_predict_start(self, trainer: Trainer, module: Module) -> None:
        """Open the predict bar."""
        self._open_eval("Predicting", self.total_predict_batches(trainer))

    @override
    def on_predict_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Count the batch; draw when due."""
        if self.eval_task is not None:
            self._eval_batch(batch_idx, self.total_predict_batches(trainer))

    @override
    def on_predict_end(self, trainer: Trainer, module: Module) -> None:
        """Close the predict bar."""
        self._close_eval()

    def __repr__(self) -> str:
        return f"RichProgressBar(refresh_rate={self.refresh_rate}, leave={self.leave}, force={self.force})"


@functools.cache
def _columns() -> tuple[type[Any], type[Any], type[Any]]:
    """The custom columns, defined on first use (they subclass rich's, which is imported only then)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Batches(ProgressColumn):
        def __init__(self, style: str) -> None:
            super().__init__()
            self.style = style

        def render(self, task: Any) -> Any:
            total = "?" if task.total is None else str(int(task.total))
            return Text(f"{int(task.completed)}/{total}", style=self.style)

    class Times(ProgressColumn):
        def __init__(self, style: str) -> None:
            super().__init__()
            self.style = style

        def render(self, task: Any) -> Any:
            elapsed = task.finished_time if task.finished else task.elapsed
            remaining = None
            if task.total is not None and task.completed and elapsed:
                remaining = 0.0 if task.finished else (task.total - task.completed) * elapsed / task.completed
            return Text(f"{_clock(elapsed)} • {_clock(remaining)}", style=self.style)

    class Speed(ProgressColumn):
        def __init__(self, style: str) -> None:
            super().__init__()
            self.style = style

        def render(self, task: Any) -> Any:
            # The mean over the bar's life: rich's own estimate needs more samples than sparse draws give.
            elapsed = task.finished_time if task.finished else task.elapsed
            if not elapsed or not task.completed:
                return Text("", style=self.style)
            return Text(f"{task.completed / elapsed:.2f}it/s", style=self.style)

    return Batches, Times, Speed


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
