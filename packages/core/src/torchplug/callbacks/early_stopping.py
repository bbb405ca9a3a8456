"""``EarlyStopping``: stop ``fit`` when a monitored metric stops improving, passes a goal, or diverges."""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any, Final

import torch

from torchplug._errors import MisconfigurationError
from torchplug.callbacks._validation import no_validation_reason
from torchplug.callbacks.callback import Callback
from torchplug.trainer.states import TrainerFn
from torchplug.utilities.rank_zero import log, rank_zero_warn

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["EarlyStopping", "EarlyStoppingReason"]

_MODES: Final = ("min", "max")


class EarlyStoppingReason(enum.Enum):
    """Why :class:`EarlyStopping` stopped training (its ``stopping_reason``); Lightning's members and values."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has not improved for ``patience`` checks.

    A check runs once per validation (or per training epoch when there is no validation, see
    ``check_on_train_epoch_end``). Training stops at the first of: no improvement by more than
    ``min_delta`` in ``patience`` checks in a row; a value past ``stopping_threshold`` (the goal);
    a value past ``divergence_threshold`` (hopeless); a NaN or infinite value (``check_finite``).
    ``Trainer(min_epochs=..., min_steps=...)`` still hold: the run stops once they are reached.
    In multi-process runs every process stops as soon as any of them decides to.

    Example:
        >>> EarlyStopping(monitor="val_loss", patience=5, min_delta=1e-3)
        >>> EarlyStopping(monitor="val_acc", mode="max", stopping_threshold=0.99)

    Args:
        monitor: The logged metric to watch (``self.log("val_loss", ...)``).
        min_delta: The smallest change that counts as an improvement.
        patience: Checks without improvement before stopping (a resumed fit keeps this value,
            with a warning when the checkpoint was written with another).
        verbose: Print the reason of every improvement and of the stop; with several processes
            each prints its own, prefixed ``[rank: N]`` (as Lightning does).
        mode: ``"min"`` (lower is better) or ``"max"``.
        strict: Raise when ``monitor`` was not logged (False: warn and skip the check).
        check_finite: Stop when the value becomes NaN or infinite.
        stopping_threshold: Stop as soon as the value is better than this.
        divergence_threshold: Stop as soon as the value is worse than this.
        check_on_train_epoch_end: Check at the end of the training epoch (True) or after each
            validation (False). None: at the end of the training epoch when validation runs exactly
            once per epoch (or not at all), as Lightning decides.
        log_rank_zero_only: With ``verbose``, only global rank 0 prints.

    Raises:
        MisconfigurationError: An unknown ``mode``, a ``patience`` that is not an int >= 0, a
            ``min_delta`` that is not a finite number >= 0, or a threshold that is not a number.

    Attributes:
        wait_count: Checks since the last improvement.
        stopped_epoch: The epoch in which training was stopped (0 if it was not).
        best_score: The best value so far (a tensor).
        stopping_reason: Why this callback stopped training, an :class:`EarlyStoppingReason`
            (``NOT_STOPPED`` until it did, and when another process's check stopped it).
        stopping_reason_message: Why training stopped, in words (None until it did).
    """

    #: Runs after the other callbacks, once the metrics of the epoch are complete.
    monitors_metrics = True

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        # The parameters are in Lightning 2.6's order, so that its positional calls mean the same here.
        if not isinstance(monitor, str) or not monitor:
            raise MisconfigurationError(
                f"EarlyStopping(monitor={monitor!r}) is not valid: give the name of a logged metric (a string), "
                "for example monitor='val_loss'."
            )
        _check_arguments(mode, patience, min_delta, stopping_threshold, divergence_threshold)
        switches = {"verbose": verbose, "strict": strict, "check_finite": check_finite}
        for name, value in {**switches, "log_rank_zero_only": log_rank_zero_only}.items():
            if not isinstance(value, bool):  # a string such as "False" would read as on
                raise MisconfigurationError(f"EarlyStopping({name}={value!r}): give True or False.")
        self.monitor = monitor
        self.min_delta = float(min_delta)
        self.patience = patience
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.verbose = verbose
        self.log_rank_zero_only = log_rank_zero_only
        self._check_on_train_epoch_end = check_on_train_epoch_end
        self._on_epoch_end = bool(check_on_train_epoch_end)
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    # -- identity and state ---------------------------------------------------------------------

    @property
    def state_key(self) -> str:
        """Unique per monitored metric and mode, so several EarlyStoppings keep separate state."""
        return f"{type(self).__qualname__}{ {'monitor': self.monitor, 'mode': self.mode}!r}"

    def state_dict(self) -> dict[str, Any]:
        """``wait_count``, ``stopped_epoch``, ``best_score`` and ``patience`` (plain data and a tensor)."""
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, but ``patience``: the one this callback was given stays.

        A checkpoint written with another ``patience`` is said so in a warning, naming both.
        """
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = torch.as_tensor(state_dict["best_score"])
        saved = int(state_dict["patience"])
        if saved != self.patience:
            rank_zero_warn(
                f"EarlyStopping(monitor={self.monitor!r}, patience={self.patience}): the checkpoint was written with "
                f"patience={saved}; this run keeps patience={self.patience} (and the checkpoint's count of "
                f"{self.wait_count} checks without improvement)."
            )

    # -- hooks ------------------------------------------------------------------------------------

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Decide where the check runs (see ``check_on_train_epoch_end``)."""
        if self._check_on_train_epoch_end is None:
            interval = trainer.val_check_interval
            self._on_epoch_end = (
                isinstance(interval, float) and interval == 1.0 and trainer.check_val_every_n_epoch == 1
            )
        else:
            self._on_epoch_end = self._check_on_train_epoch_end

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """Warn when the check runs after validation and this fit will run none: it would never stop training."""
        reason = None if self._on_epoch_end else no_validation_reason(trainer)
        if reason is not None:
            rank_zero_warn(
                f"EarlyStopping(monitor={self.monitor!r}, check_on_train_epoch_end={self._check_on_train_epoch_end}) "
                f"checks after validation, but {reason}: it will never stop this fit. Hint: pass "
                "check_on_train_epoch_end=True to check at the end of each training epoch (a metric logged in "
                "training), or let validation run."
            )

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Check at the end of the training epoch, when that is where this run checks."""
        if self._on_epoch_end and not self._skip(trainer):
            self._check(trainer)

    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Check after each validation inside ``fit``, when that is where this run checks."""
        if not self._on_epoch_end and not self._skip(trainer):
            self._check(trainer)

    # -- the check ------------------------------------------------------------------------------

    @staticmethod
    def _skip(trainer: Trainer) -> bool:
        return trainer.state.fn is not TrainerFn.FITTING or trainer.sanity_checking or bool(trainer.fast_dev_run)

    def _check(self, trainer: Trainer) -> None:
        metrics = trainer.callback_metrics
        value = metrics.get(self.monitor)
        if value is None:
            message = (
                f"EarlyStopping(monitor={self.monitor!r}) found no metric {self.monitor!r}. Logged metrics: "
                f"{', '.join(sorted(metrics)) or '(none)'}. Hint: call self.log({self.monitor!r}, value) in "
                "your Module, monitor one of those, or pass strict=False to skip checks without it."
            )
            if self.strict:
                raise MisconfigurationError(message)
            rank_zero_warn(message)
            return
        should_stop, reason = self._evaluate(value.detach().float().cpu().squeeze())
        should_stop = trainer.strategy.reduce_boolean_decision(should_stop, all=False)  # any process stops all
        if should_stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason_message = reason or "Another process decided to stop."
        if reason and self.verbose and (trainer.is_global_zero or not self.log_rank_zero_only):
            log.info(f"[rank: {trainer.global_rank}] {reason}" if trainer.world_size > 1 else reason)

    def _evaluate(self, current: torch.Tensor) -> tuple[bool, str | None]:
        """Decide on one value; returns (stop, the reason in words or None), and notes a stop's ``stopping_reason``."""
        value = float(current)
        better = (lambda a, b: a < b) if self.mode == "min" else (lambda a, b: a > b)
        best = float(self.best_score)
        sign = "<" if self.mode == "min" else ">"
        if self.check_finite and not math.isfinite(value):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            return True, (
                f"Monitored metric {self.monitor} = {value} is not finite. Previous best value was "
                f"{best:.4g}. Signaling Trainer to stop."
            )
        if self.stopping_threshold is not None and better(value, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            return True, (
                f"Stopping threshold reached: {self.monitor} = {value:.4g} {sign} "
                f"{self.stopping_threshold}. Signaling Trainer to stop."
            )
        if self.divergence_threshold is not None and better(-value, -self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            return True, (
                f"Divergence threshold reached: {self.monitor} = {value:.4g} "
                f"{'>' if self.mode == 'min' else '<'} {self.divergence_threshold}. Signaling Trainer "
                "to stop."
            )
        delta = -self.min_delta if self.mode == "min" else self.min_delta
        if better(value - delta, best):
            message = (
                f"Metric {self.monitor} improved by {abs(best - value):.4g} >= min_delta = {self.min_delta}. "
                f"New best score: {value:.4g}"
                if math.isfinite(best)
                else f"Metric {self.monitor} improved. New best score: {value:.4g}"
            )
            self.best_score = current.clone()
            self.wait_count = 0
            return False, message
        self.wait_count += 1
        if self.wait_count >= self.patience:
            self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
            return True, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. "
                f"Best score: {best:.4g}. Signaling Trainer to stop."
            )
        return False, None

    def __repr__(self) -> str:
        return (
            f"EarlyStopping(monitor={self.monitor!r}, mode={self.mode!r}, patience={self.patience}, "
            f"min_delta={self.min_delta})"
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _check_arguments(
    mode: str, patience: int, min_delta: float, stopping_threshold: float | None, divergence_threshold: float | None
) -> None:
    if mode not in _MODES:
        raise MisconfigurationError(
            f"EarlyStopping(mode={mode!r}) is not valid: choose 'min' or 'max'. Hint: 'min' when lower is better "
            "(a loss), 'max' when higher is (an accuracy)."
        )
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        raise MisconfigurationError(
            f"EarlyStopping(patience={patience!r}) is not valid: give an int >= 0, the number of checks without "
            "improvement before training stops. Hint: 0 stops at the first check without improvement."
        )
    if not _is_number(min_delta) or min_delta < 0 or math.isinf(min_delta):
        raise MisconfigurationError(
            f"EarlyStopping(min_delta={min_delta!r}) is not valid: give the smallest improvement that counts, a "
            "finite number >= 0. Hint: mode='min' or 'max' says in which direction it counts."
        )
    for name, value in (("stopping_threshold", stopping_threshold), ("divergence_threshold", divergence_threshold)):
        if value is not None and not _is_number(value):
            raise MisconfigurationError(
                f"EarlyStopping({name}={value!r}) is not valid: give a number (or None), compared with the monitored "
                "value. Hint: pass a float, for example 0.01."
            )
    if stopping_threshold is not None and divergence_threshold is not None:
        # In mode='min' the goal lies below and divergence above: a goal past the divergence bound stops every check.
        crossed = (
            stopping_threshold > divergence_threshold if mode == "min" else stopping_threshold < divergence_threshold
        )
        if crossed:
            side = "below" if mode == "min" else "above"
            raise MisconfigurationError(
                f"EarlyStopping(mode={mode!r}, stopping_threshold={stopping_threshold!r}, divergence_threshold="
                f"{divergence_threshold!r}) stops at the first check whatever the value: every value is past one of "
                f"them. Hint: with mode={mode!r} the goal (stopping_threshold) lies {side} the divergence bound."
            )
