"""``ProgressBar``: the base class of the progress bars (:class:`TQDMProgressBar`, :class:`RichProgressBar`).

It holds what every bar shares: whether bars are shown in this run (only on global rank 0, only
when their output is a terminal unless forced), ``enable()``/``disable()`` for code that must
keep the terminal to itself (the tuner's trial runs), the metrics a bar shows, and the batch
totals of each stage.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torchplug.callbacks.callback import Callback
from torchplug.utilities.env_vars import env_bool

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["ENV_VAR", "ProgressBar"]

#: Progress bar classes whose hiding (output not a terminal) this process has announced.
_ANNOUNCED: set[str] = set()


def _say_hidden_once(name: str) -> None:
    """Tell once per process that the bars are off because the output is not a terminal (a log file, a pipe)."""
    if name in _ANNOUNCED:
        return
    _ANNOUNCED.add(name)
    from torchplug.utilities.rank_zero import rank_zero_info

    rank_zero_info(
        f"{name}: no progress bar, the output is not a terminal. Set {ENV_VAR}=1 (or {name}(force=True)) "
        "to draw it anyway, or enable_progress_bar=False to say it is not wanted."
    )


#: Set to 1 to show the bars even when the output is not a terminal (0 hides them everywhere).
ENV_VAR = "TORCHPLUG_PROGRESS_BAR"


class ProgressBar(Callback):
    """The base class of progress bars: subclass it to draw progress your own way.

    ``Trainer(callbacks=[MyBar()])`` replaces the default bar (:class:`TQDMProgressBar`) with any
    subclass; ``trainer.progress_bar_callback`` is the bar in use.

    Args:
        force: True: always show the bars; False: never; None: only when the output is a terminal
            (or as the environment variable ``TORCHPLUG_PROGRESS_BAR=1``/``0`` says).
    """

    def __init__(self, force: bool | None = None) -> None:
        self.force = force
        self._enabled = True  # enable()/disable(): the user's (or the tuner's) say
        self._shown = False  # decided once per run in setup()

    # -- whether to show ------------------------------------------------------------------------

    @property
    def is_enabled(self) -> bool:
        """Whether bars are drawn now (decided at the start of each run, and by :meth:`enable`/:meth:`disable`)."""
        return self._enabled and self._shown

    @property
    def is_disabled(self) -> bool:
        """The opposite of :attr:`is_enabled`."""
        return not self.is_enabled

    def enable(self) -> None:
        """Draw again after :meth:`disable` (if this run shows bars at all)."""
        self._enabled = True

    def disable(self) -> None:
        """Stop drawing until :meth:`enable`; the tuner's finders call it around their trial runs."""
        self._enabled = False

    def _output_is_terminal(self) -> bool:
        """Whether the bar's output is a terminal (a subclass says where it writes)."""
        return False

    def _decide(self, trainer: Trainer) -> bool:
        if not trainer.is_global_zero:
            return False
        if self.force is not None:
            return self.force
        setting = env_bool(ENV_VAR, None)  # a value other than on/off/unset raises, naming the variable
        if setting is not None:
            return setting
        terminal = self._output_is_terminal()
        if not terminal:
            _say_hidden_once(type(self).__name__)
        return terminal

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Decide once per run whether the bars are shown."""
        self._shown = self._decide(trainer)

    # -- what a bar shows -----------------------------------------------------------------------

    def get_metrics(self, trainer: Trainer, module: Module) -> dict[str, Any]:
        """What a bar shows beside the training progress: the logger's version and the ``prog_bar`` metrics.

        ``v_num`` is the logger's version (the last four characters of a text version, such as a
        run id); the loss appears when the model logs it with ``self.log(..., prog_bar=True)``,
        under the name it was logged with. Called only when a bar is drawn, never per step.
        Override it to add or hide items::

            def get_metrics(self, trainer, module):
                items = super().get_metrics(trainer, module)
                items.pop("v_num", None)
                return items
        """
        items: dict[str, Any] = {}
        logger = trainer.logger
        version = logger.version if logger is not None else ""
        if version != "":  # a logger without run versions (fast_dev_run's DummyLogger) shows none
            items["v_num"] = version[-4:] if isinstance(version, str) else version
        for name, value in trainer.progress_bar_metrics.items():
            items[name] = f"{value:.4g}"
        return items

    # -- the totals -----------------------------------------------------------------------------

    @staticmethod
    def total_train_batches(trainer: Trainer) -> int | None:
        """Training batches in this epoch, or None for a loader without a length."""
        return _finite(trainer.num_training_batches)

    @staticmethod
    def total_val_batches(trainer: Trainer) -> int | None:
        """Validation batches in this validation run (the sanity check's few when it runs), or None if unknown."""
        counts = list(trainer.num_val_batches)
        if trainer.sanity_checking:
            steps = trainer.num_sanity_val_steps
            counts = [n if steps == -1 else min(steps, n) for n in counts]
        return _total(counts)

    @staticmethod
    def total_test_batches(trainer: Trainer) -> int | None:
        """Test batches in this run, or None if unknown."""
        return _total(trainer.num_test_batches)

    @staticmethod
    def total_predict_batches(trainer: Trainer) -> int | None:
        """Predict batches in this run, or None if unknown."""
        return _total(trainer.num_predict_batches)


def _finite(total: float | None) -> int | None:
    return None if total is None or math.isinf(total) else int(total)


def _total(counts: list[float]) -> int | None:
    total = sum(counts)
    return _finite(float(total)) if total else None
