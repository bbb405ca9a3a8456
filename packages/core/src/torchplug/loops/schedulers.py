"""Stepping the learning-rate schedulers of automatic optimization, when and as Lightning users expect.

Step-interval schedulers step after each optimizer step, counted by the batch index within the
epoch (``frequency`` applies to it); epoch-interval ones after the epoch's last batch. Schedulers
that monitor a metric (``ReduceLROnPlateau``) step later, once that metric exists: after the
batch's validation (step interval) or after the epoch's metrics (epoch interval). Each step goes
through the module's ``lr_scheduler_step`` hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug._errors import MisconfigurationError
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from collections.abc import Callable

    from torchplug.loops.state import RunState
    from torchplug.trainer.hooks import HookRunner
    from torchplug.trainer.logger_connector import LoggerConnector

__all__ = ["SchedulerStepper"]


class SchedulerStepper:
    """Steps the run's ``lr_scheduler_configs`` through the module's ``lr_scheduler_step``.

    Args:
        run: The run's state (its module and scheduler configs).
        hooks: Runs the module's ``lr_scheduler_step``.
        logging: The logged metrics, which a ReduceLROnPlateau monitors.
        current_epoch: The epoch in progress.
    """

    def __init__(
        self, run: RunState, hooks: HookRunner, logging: LoggerConnector, current_epoch: Callable[[], int]
    ) -> None:
        self._run = run
        self._hooks = hooks
        self._logging = logging
        self._current_epoch = current_epoch

    def _has(self, interval: str, plateau: bool) -> bool:
        return any(c.interval == interval and c.reduce_on_plateau is plateau for c in self._run.lr_scheduler_configs)

    @property
    def has_step_interval(self) -> bool:
        """Whether a step-interval scheduler that needs no metric exists."""
        return self._has("step", False)

    @property
    def has_epoch_interval(self) -> bool:
        """Whether an epoch-interval scheduler that needs no metric exists."""
        return self._has("epoch", False)

    @property
    def has_plateau_step_interval(self) -> bool:
        """Whether a step-interval ReduceLROnPlateau exists."""
        return self._has("step", True)

    @property
    def has_plateau_epoch_interval(self) -> bool:
        """Whether an epoch-interval ReduceLROnPlateau exists."""
        return self._has("epoch", True)

    def step(self, interval: str, batch_idx: int, plateau: bool) -> None:
        """Step the schedulers of ``interval`` (``"step"`` or ``"epoch"``) that are due, metric-monitoring ones or not.

        Raises:
            MisconfigurationError: A monitored metric was never logged and the config is ``strict``.
        """
        run = self._run
        if run.module is None or not run.module.automatic_optimization:
            return
        count = (batch_idx if interval == "step" else self._current_epoch()) + 1
        metrics = self._logging.callback_metrics
        for config in run.lr_scheduler_configs:
            if config.interval != interval or config.reduce_on_plateau is not plateau or count % config.frequency:
                continue
            metric = None
            if plateau:
                metric = metrics.get(config.monitor or "")
                if metric is None:
                    if config.strict:
                        raise MisconfigurationError(
                            f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged. Logged: "
                            f"{', '.join(sorted(metrics)) or '(none)'}. Hint: self.log it, or set "
                            "'strict': False in the lr_scheduler dict."
                        )
                    rank_zero_warn(
                        f"ReduceLROnPlateau skipped: {config.monitor!r} was not logged.", category=RuntimeWarning
                    )
                    continue
            self._hooks.call_module("lr_scheduler_step", config.scheduler, metric)
