"""Lightning's loop progress surface (``fit_loop.epoch_progress``, ``fit_loop.epoch_loop.batch_progress``...).

The fit loop keeps its position in one place, :class:`~torchplug.trainer.states.FitProgress`. The
counters Lightning users read (``ready``/``started``/``processed``/``completed``, per epoch and in
total) are derived from it on each read, by the same function that writes them into
Lightning-compatible checkpoints (:func:`~torchplug.trainer.checkpoint_layout.lightning_loops`),
so the two can never disagree. They are read-only views: the loop's position changes only as the
loop runs, or through a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchplug.loops.evaluation import EvaluationLoop
    from torchplug.loops.fit import FitLoop

__all__ = ["Counters", "EpochLoop"]


class Counters:
    """Read-only counters (``ready``, ``started``, ``processed``, ``completed``; nested ``total``/``current``).

    Args:
        values: The counters, as Lightning writes them into a checkpoint's ``loops`` entry.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        try:
            value = self._values[name]
        except KeyError:
            raise AttributeError(
                f"{name!r} is not one of these progress counters ({', '.join(self._values)})."
            ) from None
        return Counters(value) if isinstance(value, Mapping) else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"Loop progress is read-only here ({name} = {value!r}): it follows the loop as it runs. Hint: resume "
            "from a checkpoint (fit(ckpt_path=...)) to start from another position."
        )

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain data, as Lightning's progress ``state_dict()`` returns them."""
        return _plain(self._values)

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps taken in total (on an optimization progress: ``optimizer.step.total.completed``)."""
        return int(self._values["optimizer"]["step"]["total"]["completed"])

    def __repr__(self) -> str:
        return f"Counters({_plain(self._values)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Counters):
            return _plain(self._values) == _plain(other._values)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, and not fixed over time


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in values.items()}


class _Optimization:
    """``epoch_loop.automatic_optimization`` / ``manual_optimization``: their progress counters."""

    __slots__ = ("_epoch_loop", "_key")

    def __init__(self, epoch_loop: EpochLoop, key: str) -> None:
        self._epoch_loop = epoch_loop
        self._key = key

    @property
    def optim_progress(self) -> Counters:
        """The optimizer's ``step`` and ``zero_grad`` counters (``optim_progress.optimizer_steps``)."""
        return Counters(self._epoch_loop._loops()[f"epoch_loop.{self._key}.optim_progress"])

    @property
    def optim_step_progress(self) -> Counters:
        """The optimizer's ``step`` counters (manual optimization)."""
        return Counters(self._epoch_loop._loops()[f"epoch_loop.{self._key}.optim_step_progress"])


class EpochLoop:
    """``trainer.fit_loop.epoch_loop``: the training epoch's batch position, as Lightning's epoch loop shows it.

    Args:
        fit_loop: The fit loop whose position this shows.
    """

    __slots__ = ("_fit_loop", "automatic_optimization", "manual_optimization")

    def __init__(self, fit_loop: FitLoop) -> None:
        self._fit_loop = fit_loop
        #: The counters of automatic optimization (``optim_progress``).
        self.automatic_optimization = _Optimization(self, "automatic_optimization")
        #: The counters of manual optimization (``optim_step_progress``).
        self.manual_optimization = _Optimization(self, "manual_optimization")

    def _loops(self) -> dict[str, Any]:
        return self._fit_loop.lightning_counters()

    @property
    def batch_progress(self) -> Counters:
        """Training batches: ``current`` (this epoch) and ``total`` counters, and ``is_last_batch``."""
        return Counters(self._loops()["epoch_loop.batch_progress"])

    @property
    def scheduler_progress(self) -> Counters:
        """Learning-rate scheduler steps (not counted by torchplug: always 0, as Lightning's checkpoints hold)."""
        return Counters(self._loops()["epoch_loop.scheduler_progress"])

    @property
    def val_loop(self) -> EvaluationLoop:
        """The validation loop run inside ``fit``."""
        return self._fit_loop.val_loop

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self._fit_loop.progress.global_step

    @property
    def _batches_that_stepped(self) -> int:
        """Training batches that ended with an optimizer step: the step metrics are logged at."""
        return self._fit_loop.progress.stepped_batches

    @property
    def total_batch_idx(self) -> int:
        """The index of the last training batch run, over all epochs (-1 before the first)."""
        return self._fit_loop.total_batch_idx

    @property
    def batch_idx(self) -> int:
        """The index of the last training batch run in this epoch (-1 before its first)."""
        return self._fit_loop.batch_idx

    @property
    def max_steps(self) -> int:
        """The fit's ``max_steps`` (-1: no limit)."""
        return self._fit_loop.max_steps

    @property
    def min_steps(self) -> int | None:
        """The fit's ``min_steps``."""
        return self._fit_loop.min_steps

    @property
    def done(self) -> bool:
        """Whether training ends now (a limit reached, or a stop request past the minimums)."""
        return self._fit_loop.done
