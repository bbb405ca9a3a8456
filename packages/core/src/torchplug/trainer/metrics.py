"""What ``self.log`` records: step values and epoch aggregates, converted to numbers only when read.

``self.log`` sits on the training hot path, so a call does little: one dict lookup, a
``detach``, and for epoch aggregates one add. Values stay tensors (no device sync) until a
logger, the progress bar or a callback reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import torch

__all__ = ["MetricStore"]

_REDUCE_FX: Final = ("mean", "sum", "max", "min")


class _Metric:
    __slots__ = (
        "epoch_value",
        "fresh",
        "last",
        "logger",
        "name",
        "on_epoch",
        "on_step",
        "prog_bar",
        "reduce_fx",
        "sync_dist",
        "total",
        "weight",
    )

    def __init__(
        self, name: str, prog_bar: bool, logger: bool, on_step: bool, on_epoch: bool, reduce_fx: str, sync_dist: bool
    ) -> None:
        self.name = name
        self.prog_bar = prog_bar
        self.logger = logger
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.reduce_fx = reduce_fx
        self.sync_dist = sync_dist
        self.last: Any = None
        self.fresh = False
        self.total: Any = None
        self.weight = 0.0
        self.epoch_value: Any = None

    def step_key(self) -> str:
        return f"{self.name}_step" if self.on_epoch else self.name

    def epoch_key(self) -> str:
        return f"{self.name}_epoch" if self.on_step else self.name


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}, ...) needs one number, got a tensor of shape {tuple(value.shape)}. "
                "Hint: reduce it first, for example value.mean()."
            )
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"self.log({name!r}, ...) needs a number or a one-element tensor, got {type(value).__name__}.")


def _as_float(value: Any) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


class MetricStore:
    """The metrics logged in one run, per stage (``train``, ``validate``, ``test``).

    Args:
        reduce: The strategy's reduce (``reduce(tensor, reduce_op=...)``), for ``sync_dist``.
    """

    def __init__(self, reduce: Callable[..., Any]) -> None:
        self._reduce = reduce
        self._stages: dict[str, dict[str, _Metric]] = {}
        self._active: dict[str, _Metric] = {}
        self.stage = "train"
        #: Defaults of ``on_step``/``on_epoch``: (True, False) inside training batches, else (False, True).
        self.defaults = (False, True)
        #: The batch being processed, for inferring the weight of epoch means.
        self.current_batch: Any = None
        self._sized: tuple[Any, float] | None = None  # (the batch it was inferred from, its size)
        #: Appended to every name (``/dataloader_idx_1`` when evaluating several dataloaders).
        self.suffix = ""

    # -- recording ------------------------------------------------------------------------------

    def set_stage(self, stage: str, reset: bool) -> None:
        """Make ``stage`` the one ``log`` records into; ``reset`` clears its values (a new epoch)."""
        self.stage = stage
        if reset or stage not in self._stages:
            self._stages[stage] = {}
        self._active = self._stages[stage]

    def drop_stage(self, stage: str) -> None:
        """Forget everything ``stage`` recorded (the sanity check's values are never reported)."""
        self._stages.pop(stage, None)

    def new_batch(self, batch: Any) -> None:
        """Note the batch being processed (its size weighs epoch means; inferred only if a mean needs it)."""
        self.current_batch = batch

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: str,
        sync_dist: bool,
        batch_size: int | None,
    ) -> None:
        """Record one value (see ``Module.log`` for the meaning of the options)."""
        if self.suffix:
            name += self.suffix
        metric = self._active.get(name)
        if metric is None:
            metric = self._create(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)
        if isinstance(value, torch.Tensor):
            value = value.detach()
        if metric.on_step:
            metric.last = self._reduce(value, reduce_op=metric.reduce_fx) if metric.sync_dist else value
            metric.fresh = True
        if metric.on_epoch:
            self._accumulate(metric, value, batch_size)

    def _create(
        self,
        name: str,
        value: Any,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: str,
        sync_dist: bool,
    ) -> _Metric:
        if not isinstance(name, str) or not name:
            raise TypeError(f"self.log needs a non-empty string name, got {name!r}.")
        _check_value(name, value)
        if reduce_fx not in _REDUCE_FX:
            raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): choose one of {', '.join(_REDUCE_FX)}.")
        step_default, epoch_default = self.defaults
        metric = _Metric(
            name,
            prog_bar,
            logger,
            step_default if on_step is None else on_step,
            epoch_default if on_epoch is None else on_epoch,
            reduce_fx,
            sync_dist,
        )
        if not (metric.on_step or metric.on_epoch):
            raise ValueError(f"self.log({name!r}, on_step=False, on_epoch=False) records nothing; set one of them.")
        self._active[name] = metric
        return metric

    def _accumulate(self, metric: _Metric, value: Any, batch_size: int | None) -> None:
        fx = metric.reduce_fx
        if fx == "mean":
            weight = float(batch_size) if batch_size is not None else self._inferred_batch_size()
            metric.total = value * weight if metric.total is None else metric.total + value * weight
            metric.weight += weight
        elif fx == "sum":
            metric.total = value if metric.total is None else metric.total + value
        elif metric.total is None:
            metric.total = value
        else:
            pick = max if fx == "max" else min
            metric.total = (
                pick(metric.total, value)
                if not isinstance(value, torch.Tensor)
                else (torch.maximum(metric.total, value) if fx == "max" else torch.minimum(metric.total, value))
            )

    def _inferred_batch_size(self) -> float:
        batch, sized = self.current_batch, self._sized
        if sized is None or sized[0] is not batch:
            sized = self._sized = (batch, float(_batch_size(batch) or 1))
        return sized[1]

    # -- aggregating ----------------------------------------------------------------------------

    def compute_epoch(self, stage: str) -> None:
        """Turn the epoch totals of ``stage`` into values (synced over processes where asked).

        Every process must call this at the same point: ``sync_dist`` metrics are reduced in name order.
        """
        for name in sorted(self._stages.get(stage, {})):
            metric = self._stages[stage][name]
            if not metric.on_epoch or metric.total is None:
                continue
            total = metric.total
            if metric.reduce_fx == "mean":
                weight: Any = metric.weight
                if metric.sync_dist:
                    packed = torch.stack(
                        [
                            torch.as_tensor(total, dtype=torch.float64).reshape(()),
                            torch.as_tensor(weight, dtype=torch.float64),
                        ]
                    )
                    packed = self._reduce(packed, reduce_op="sum")
                    total, weight = packed[0], packed[1]
                metric.epoch_value = total / weight
            else:
                metric.epoch_value = (
                    self._reduce(torch.as_tensor(total), reduce_op=metric.reduce_fx) if metric.sync_dist else total
                )

    # -- reading --------------------------------------------------------------------------------

    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every metric, for callbacks (``ModelCheckpoint(monitor=...)``)."""
        out: dict[str, torch.Tensor] = {}
        for store in self._stages.values():
            for metric in store.values():
                if metric.on_step and metric.last is not None:
                    out[metric.step_key()] = torch.as_tensor(metric.last)
                    out.setdefault(metric.name, out[metric.step_key()])
                if metric.epoch_value is not None:
                    out[metric.epoch_key()] = torch.as_tensor(metric.epoch_value)
                    out[metric.name] = out[metric.epoch_key()]
        return out

    def take_step_metrics(self) -> dict[str, float]:
        """The step values logged since the last call, for the loggers (read once each)."""
        out: dict[str, float] = {}
        for metric in self._active.values():
            if metric.fresh and metric.logger:
                out[metric.step_key()] = _as_float(metric.last)
                metric.fresh = False
        return out

    def epoch_metrics(self, stage: str) -> dict[str, float]:
        """The epoch aggregates of ``stage`` for the loggers."""
        return {
            m.epoch_key(): _as_float(m.epoch_value)
            for m in self._stages.get(stage, {}).values()
            if m.logger and m.epoch_value is not None
        }

    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``, as numbers."""
        out: dict[str, float] = {}
        for store in self._stages.values():
            for metric in store.values():
                if not metric.prog_bar:
                    continue
                if metric.on_step and metric.last is not None:
                    out[metric.step_key()] = _as_float(metric.last)
                if metric.epoch_value is not None:
                    out[metric.epoch_key()] = _as_float(metric.epoch_value)
        return out


def _batch_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = _batch_size(item)
            if size is not None:
                return size
    if isinstance(batch, dict):
        for item in batch.values():
            size = _batch_size(item)
            if size is not None:
                return size
    return None
