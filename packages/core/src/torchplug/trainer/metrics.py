"""What ``self.log`` records: step values and epoch aggregates, converted to numbers only when read.

``self.log`` sits on the training hot path, so a call does little: one dict lookup, a
``detach``, and for epoch aggregates one add. Values stay tensors (no device sync) until a
logger, the progress bar or a callback reads them.

A torchmetrics ``Metric`` may be logged instead of a value: its step value is what its last
``forward`` returned (``metric(preds, target)``), its epoch value is ``compute()`` (which
torchmetrics synchronises over the processes), and it is ``reset()`` when its epoch or
evaluation run ends. torchmetrics is never imported here: a logged object is recognised as a
Metric only when the user's code has imported torchmetrics already.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import torch

from torchplug._errors import LoggedValueError, MisconfigurationError

if TYPE_CHECKING:
    from torchplug.core.module import Module

__all__ = ["BATCH_EVAL", "BATCH_TRAIN", "EPOCH", "LogPhase", "MetricStore", "as_tensor", "reduce_fx_name"]

_REDUCE_FX: Final = ("mean", "sum", "max", "min")
_Tensor: Final = torch.Tensor
_DATALOADER_SUFFIX: Final = "/dataloader_idx_"


class LogPhase(NamedTuple):
    """Where ``self.log`` is being called: its ``on_step``/``on_epoch`` defaults, and whether ``on_step`` is allowed."""

    on_step: bool
    on_epoch: bool
    step_allowed: bool


#: Inside training batches: ``training_step``, the batch, backward and optimizer hooks.
BATCH_TRAIN: Final = LogPhase(True, False, True)
#: Inside validation and test batches: the steps and the batch hooks.
BATCH_EVAL: Final = LogPhase(False, True, True)
#: The start and epoch hooks (``on_train_epoch_end``, ``on_validation_start``...): epoch values only.
EPOCH: Final = LogPhase(False, True, False)


def reduce_fx_name(name: str, reduce_fx: Any) -> str:
    """``self.log``'s ``reduce_fx`` as one of ``mean``, ``sum``, ``max``, ``min``.

    Accepts those strings (any case, and ``"avg"``), and ``torch.mean``, ``torch.sum``,
    ``torch.max``, ``torch.min`` and the builtins ``sum``, ``max``, ``min``.

    Raises:
        ValueError: Any other reduction, with a hint to log a torchmetrics Metric instead.
    """
    if isinstance(reduce_fx, str):
        fx = reduce_fx.lower()
        fx = "mean" if fx == "avg" else fx
        if fx in _REDUCE_FX:
            return fx
    else:
        for fx, functions in _REDUCE_CALLABLES.items():
            if any(reduce_fx is f for f in functions):
                return fx
    raise ValueError(
        f"self.log({name!r}, reduce_fx={reduce_fx!r}): choose 'mean', 'sum', 'max' or 'min' (or torch.mean, "
        "torch.sum, torch.max, torch.min). Hint: for another reduction, log a torchmetrics Metric that computes it."
    )


_REDUCE_CALLABLES: Final[dict[str, tuple[Callable[..., Any], ...]]] = {
    "mean": (torch.mean,),
    "sum": (torch.sum, sum),
    "max": (torch.max, max),
    "min": (torch.min, min),
}


class _Metric:
    __slots__ = (
        "args",
        "dataloader_idx",
        "enable_graph",
        "epoch_value",
        "last",
        "logger",
        "name",
        "obj",
        "on_epoch",
        "on_step",
        "options",
        "phase",
        "prog_bar",
        "reduce_fx",
        "sync",
        "total",
        "weight",
    )

    def __init__(
        self,
        name: str,
        prog_bar: bool,
        logger: bool,
        on_step: bool,
        on_epoch: bool,
        reduce_fx: str,
        sync: Callable[[Any, str], Any] | None,
        obj: Any,
        enable_graph: bool,
        dataloader_idx: int | None,
    ) -> None:
        self.name = name
        self.prog_bar = prog_bar
        self.logger = logger
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.reduce_fx = reduce_fx
        self.sync = sync  # reduce over processes (sync_dist=True, not rank_zero_only), else None
        self.obj = obj  # a torchmetrics Metric, else None
        self.enable_graph = enable_graph
        self.dataloader_idx = dataloader_idx
        self.last: Any = None
        self.total: Any = None
        self.weight = 0.0
        self.epoch_value: Any = None
        #: The ``self.log`` options of the last call accepted (LOG_OPTIONS' order) and the phase it was
        #: made in: the same options again in the same phase need no check.
        self.args: tuple[Any, ...] = ()
        self.phase: LogPhase | None = None
        #: What the first call's options mean, resolved (see :func:`_options`): later calls must agree.
        self.options: dict[str, Any] = {}

    def step_key(self) -> str:
        return _forked(self.name, "_step") if self.on_epoch else self.name

    def epoch_key(self) -> str:
        return _forked(self.name, "_epoch") if self.on_step else self.name


def _forked(name: str, suffix: str) -> str:
    """``name`` with ``_step``/``_epoch`` before its dataloader suffix (``loss_step/dataloader_idx_1``)."""
    base, sep, idx = name.partition(_DATALOADER_SUFFIX)
    return f"{base}{suffix}{sep}{idx}"


def _options(
    name: str,
    phase: LogPhase,
    prog_bar: bool,
    logger: bool,
    on_step: bool | None,
    on_epoch: bool | None,
    reduce_fx: Any,
    enable_graph: bool,
    sync_dist: bool,
    sync_dist_group: Any,
    metric_attribute: str | None,
    rank_zero_only: bool,
) -> dict[str, Any]:
    """What ``self.log``'s options mean in ``phase``: defaults resolved, ``reduce_fx`` by name; refuses bad ones."""
    step = phase.on_step if on_step is None else bool(on_step)
    epoch = phase.on_epoch if on_epoch is None else bool(on_epoch)
    if not (step or epoch):
        raise ValueError(f"self.log({name!r}, on_step=False, on_epoch=False) records nothing; set one of them.")
    if step and not phase.step_allowed:
        raise MisconfigurationError(
            f"self.log({name!r}, on_step=True) in a start or epoch-end hook: there is no step here. "
            "Hint: log it with on_step=False (an epoch value), or from a step or batch hook."
        )
    sync = bool(sync_dist) and not rank_zero_only
    return {
        "prog_bar": bool(prog_bar),
        "logger": bool(logger),
        "on_step": step,
        "on_epoch": epoch,
        "reduce_fx": reduce_fx_name(name, reduce_fx),
        "enable_graph": bool(enable_graph),
        "sync_dist": sync,
        "sync_dist_group": sync_dist_group if sync else None,
        "metric_attribute": metric_attribute,
        "rank_zero_only": bool(rank_zero_only),
    }


def _warn_unsynced(name: str, world_size: int) -> None:
    """Once per name and process, on rank 0: an epoch value that each process reduces over its own batches only."""
    from torchplug.utilities.rank_zero import rank_zero_only
    from torchplug.utilities.warn import warn_once
    from torchplug.utilities.warnings import PossibleUserWarning

    if rank_zero_only.is_zero():
        warn_once(
            f"self.log({name!r}, ...) records an epoch value without sync_dist=True under {world_size} processes: "
            f"each process reduces its own batches only, so the loggers and the progress bar show rank 0's value, "
            f"and callbacks that monitor it (ModelCheckpoint, EarlyStopping) judge a part of the data. Hint: "
            f"self.log({name!r}, ..., sync_dist=True) reduces it over all processes at each epoch's end, or log a "
            "torchmetrics Metric, which syncs itself; rank_zero_only=True says rank 0's value is meant.",
            PossibleUserWarning,
        )


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise LoggedValueError(
                f"self.log({name!r}, ...) needs one number, got a tensor of shape {tuple(value.shape)}. "
                "Hint: reduce it first, for example value.mean()."
            )
        return
    if isinstance(value, Mapping):
        raise LoggedValueError(
            f"self.log({name!r}, ...) needs one number, got a {type(value).__name__} of {len(value)} values. Hint: "
            f"self.log_dict({{...}}) logs each entry under its own name."
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LoggedValueError(
            f"self.log({name!r}, ...) needs a number, a one-element tensor or a torchmetrics Metric, "
            f"got {type(value).__name__}."
        )


def _is_torchmetric(value: Any) -> bool:
    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(value, torchmetrics.Metric)


def as_tensor(value: Any, detach: bool = True) -> torch.Tensor:
    """A logged value as Lightning reports it: a floating-point scalar tensor (detached unless ``detach=False``)."""
    if isinstance(value, torch.Tensor):
        tensor = (value.detach() if detach else value).reshape(())
        return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.to(torch.get_default_dtype())
    return torch.tensor(float(value))


def _as_float(value: Any) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


#: The options of ``self.log`` as :meth:`MetricStore.log` receives them, in this order, in one tuple.
LOG_OPTIONS: Final = (
    "prog_bar",
    "logger",
    "on_step",
    "on_epoch",
    "reduce_fx",
    "enable_graph",
    "sync_dist",
    "sync_dist_group",
    "metric_attribute",
    "rank_zero_only",
)

#: What :attr:`MetricStore.on_clear` is called with: a stage's callback, logger and progress bar values.
OnClear = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, float]], None]


class MetricStore:
    """The metrics logged in one run, per stage (``train``, ``validate``, ``test``).

    Args:
        reduce: The strategy's reduce (``reduce(tensor, group=..., reduce_op=...)``), for ``sync_dist``.
        module: The module that logs (its torchmetrics attributes are looked up by name).
        world_size: The number of processes: above 1, an epoch value logged without ``sync_dist``
            is warned about (it is rank 0's own value alone).
    """

    def __init__(self, reduce: Callable[..., Any], module: Module | None = None, world_size: int = 1) -> None:
        self._reduce = reduce
        self._world_size = world_size
        self._module = module
        self._stages: dict[str, dict[str, _Metric]] = {}
        self._active: dict[str, _Metric] = {}
        self._objects: dict[str, list[_Metric]] = {}  # per stage: the entries that hold a torchmetrics Metric
        self.stage = "train"
        #: Where ``self.log`` is called now (its defaults), or None where it may not log (setup, predict...).
        self.phase: LogPhase | None = None
        #: The batch being processed, for inferring the weight of epoch means.
        self.current_batch: Any = None
        self._sized: tuple[Any, float] | None = None  # (the batch it was inferred from, its size)
        #: The dataloader being evaluated when there are several (its index is added to the names), else None.
        self.dataloader_idx: int | None = None
        #: Called with a stage's callback, logger and progress bar values right before they are cleared (see
        #: :meth:`set_stage`).
        self.on_clear: OnClear | None = None

    # -- recording ------------------------------------------------------------------------------

    def set_stage(self, stage: str, reset: bool) -> None:
        """Make ``stage`` the one ``log`` records into; ``reset`` clears its values (a new epoch)."""
        self.stage = stage
        if reset or stage not in self._stages:
            old = self._stages.get(stage)
            if old and self.on_clear is not None:
                self.on_clear(
                    self._callback_values(old, stage == "train"), self._logged_values(old), self._prog_bar_values(old)
                )
            self._stages[stage] = {}
            self._objects[stage] = []
        self._active = self._stages[stage]

    def drop_stage(self, stage: str) -> None:
        """Forget everything ``stage`` recorded (the sanity check's values are never reported)."""
        self.reset_metric_objects(stage)
        self._stages.pop(stage, None)
        self._objects.pop(stage, None)

    def reset_metric_objects(self, stage: str) -> None:
        """``reset()`` the torchmetrics Metrics logged in ``stage`` (at the end of its epoch or run)."""
        for metric in self._objects.get(stage, ()):
            metric.obj.reset()

    def new_batch(self, batch: Any) -> None:
        """Note the batch being processed (its size weighs epoch means; inferred only if a mean needs it)."""
        self.current_batch = batch

    def log(
        self, name: str, value: Any, options: tuple[Any, ...], add_dataloader_idx: bool, batch_size: int | None
    ) -> None:
        """Record one value (see ``Module.log`` for the meaning of the options).

        Args:
            name: The name given to ``self.log``.
            value: The value given to ``self.log``.
            options: ``self.log``'s options in the order of :data:`LOG_OPTIONS`. One tuple rather than
                keywords: this call runs for every ``self.log``, where ten keywords would cost more
                than the rest of a repeated call, and a repeated call is recognised by this tuple alone.
            add_dataloader_idx: Whether the dataloader index is added to the name.
            batch_size: The weight of this value in the epoch mean; inferred from the batch when None.
        """
        idx = self.dataloader_idx
        key = name if idx is None or not add_dataloader_idx else f"{name}{_DATALOADER_SUFFIX}{idx}"
        metric = self._active.get(key)
        phase = self.phase
        if metric is None:
            metric = self._create(key, name, value, options, add_dataloader_idx)
            metric.args, metric.phase = options, phase
        else:
            if options != metric.args or phase != metric.phase:  # the same call as before costs these comparisons
                self._check_same_options(metric, name, options, phase)
            if idx is not None and metric.dataloader_idx != idx:
                raise MisconfigurationError(
                    f"self.log({name!r}, add_dataloader_idx=False) was called for dataloaders "
                    f"{metric.dataloader_idx} and {idx}: their values would mix. Hint: give each dataloader its own "
                    "name, or drop add_dataloader_idx=False."
                )
            if metric.obj is None:
                kind = type(value)  # the common values checked without a call: a 0-d tensor, a float, an int
                if kind is _Tensor:
                    if value.ndim:
                        _check_value(name, value)
                elif kind is not float and kind is not int:
                    _check_value(name, value)
            elif value is not metric.obj:
                raise MisconfigurationError(
                    f"self.log({name!r}, ...) was first given the torchmetrics Metric {type(metric.obj).__name__} "
                    f"and now {type(value).__name__}: one name logs one Metric object. Hint: log the other value "
                    "under its own name."
                )
        if metric.obj is not None:
            metric.last = value._forward_cache if metric.on_step else None  # what its last forward() returned
            return
        if isinstance(value, torch.Tensor) and not metric.enable_graph:
            value = value.detach()
        if metric.on_step:
            metric.last = value if metric.sync is None else metric.sync(value, metric.reduce_fx)
        if metric.on_epoch:
            self._accumulate(metric, value, batch_size)

    def _create(self, key: str, name: str, value: Any, given: tuple[Any, ...], add_dataloader_idx: bool) -> _Metric:
        """The first ``self.log`` of ``key`` in this stage: check it and decide how its values are recorded."""
        prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist, sync_dist_group = given[:8]
        metric_attribute, rank_zero_only = given[8:]
        if not isinstance(name, str) or not name:
            raise TypeError(f"self.log needs a non-empty string name, got {name!r}.")
        phase = self.phase
        if phase is None:
            raise MisconfigurationError(
                f"self.log({name!r}) was called where nothing is logged: only the training, validation and test "
                "steps and the hooks around them log (not setup, on_fit_start, on_train_end, predict, the "
                "dataloader or checkpoint hooks...). Hint: write to the logger directly, self.logger.log_metrics()."
            )
        if add_dataloader_idx and _DATALOADER_SUFFIX in name:
            raise MisconfigurationError(
                f"self.log({name!r}): the name already holds a dataloader index, which add_dataloader_idx=True "
                "adds itself. Hint: log the plain name, or pass add_dataloader_idx=False."
            )
        obj = value if _is_torchmetric(value) else None
        if obj is None:
            _check_value(name, value)
        else:
            self._check_metric_attribute(name, obj, metric_attribute)
        options = _options(
            name=name,
            phase=phase,
            prog_bar=prog_bar,
            logger=logger,
            on_step=on_step,
            on_epoch=on_epoch,
            reduce_fx=reduce_fx,
            enable_graph=enable_graph,
            sync_dist=sync_dist,
            sync_dist_group=sync_dist_group,
            metric_attribute=metric_attribute,
            rank_zero_only=rank_zero_only,
        )
        fx, step, epoch = options["reduce_fx"], options["on_step"], options["on_epoch"]
        if epoch and obj is None and not sync_dist and not rank_zero_only and self._world_size > 1:
            _warn_unsynced(key, self._world_size)
        sync = None
        if sync_dist and not rank_zero_only and obj is None:
            reduce = self._reduce
            sync = (lambda v, op: reduce(v, reduce_op=op)) if sync_dist_group is None else (
                lambda v, op: reduce(v, group=sync_dist_group, reduce_op=op))  # fmt: skip
        metric = _Metric(
            name=key,
            prog_bar=prog_bar,
            logger=logger,
            on_step=step,
            on_epoch=epoch,
            reduce_fx=fx,
            sync=sync,
            obj=obj,
            enable_graph=enable_graph,
            dataloader_idx=self.dataloader_idx,
        )
        metric.options = options
        self._active[key] = metric
        if obj is not None:
            self._objects.setdefault(self.stage, []).append(metric)
        return metric

    def _check_same_options(self, metric: _Metric, name: str, args: tuple[Any, ...], phase: LogPhase | None) -> None:
        """A later ``self.log`` of the same name in the same phase must mean what the first call meant.

        The first call decides how the value is recorded (step or epoch, the reduction, the
        progress bar...); a later call asking for something else would be ignored, so it is refused,
        naming the options that differ. Spellings with the same meaning (``on_step=None`` and its
        default, ``"mean"`` and ``torch.mean``) are accepted. Calls from another phase (``training_step``
        and ``on_train_epoch_end``, with other defaults) are recorded under the first call's options.
        """
        if phase != metric.phase or phase is None:
            return
        options = _options(name, phase, *args)
        changed = [key for key, value in options.items() if value != metric.options[key]]
        if changed:
            was = ", ".join(f"{key}={metric.options[key]!r}" for key in changed)
            now = ", ".join(f"{key}={options[key]!r}" for key in changed)
            raise MisconfigurationError(
                f"self.log({name!r}, ...) was called with {now}, but {name!r} was first logged here with {was}. "
                "One name keeps one set of options in a stage, so the new ones would be ignored. Hint: pass the "
                "same options every time, or log under another name."
            )
        metric.args = args

    def _check_metric_attribute(self, name: str, obj: Any, attribute: str | None) -> None:
        """The torchmetrics Metric must be an attribute of the module (as Lightning requires), found by name."""
        module = self._module
        if module is None:
            return
        found = {id(m): n for n, m in module.named_modules() if _is_torchmetric(m)}
        if attribute is not None:
            if dict(module.named_modules()).get(attribute) is not obj:
                raise MisconfigurationError(
                    f"self.log({name!r}, metric_attribute={attribute!r}): the module has no Metric attribute "
                    f"{attribute!r} holding the logged Metric. Its Metric attributes: {sorted(found.values())}."
                )
            return
        if id(obj) not in found:
            raise MisconfigurationError(
                f"self.log({name!r}, <{type(obj).__name__}>): the Metric is not an attribute of "
                f"{type(module).__name__}, so its state would not follow the module (device, checkpoints). "
                "Hint: assign it in __init__, self.metric = ..., or name it with metric_attribute=..."
                + (f" (one of {sorted(found.values())})" if found else "")
            )

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

    def compute_epoch(self, stage: str, dataloader_idx: int | None = None) -> None:
        """Turn the epoch totals of ``stage`` into values (synced over processes where asked).

        With several dataloaders, each one's values are computed when it is done
        (``dataloader_idx``), and the rest (logged in the epoch-end hooks) at the end.

        Every process must call this at the same point: ``sync_dist`` metrics are reduced, and
        torchmetrics Metrics computed, in name order.
        """
        for name in sorted(self._stages.get(stage, {})):
            metric = self._stages[stage][name]
            if not metric.on_epoch or metric.dataloader_idx != dataloader_idx:
                continue
            if metric.obj is not None:
                metric.epoch_value = metric.obj.compute()
                continue
            if metric.total is None:
                continue
            total = metric.total
            if metric.reduce_fx == "mean":
                weight: Any = metric.weight
                if metric.sync is not None:
                    packed = torch.stack(
                        [
                            torch.as_tensor(total, dtype=torch.float64).reshape(()),
                            torch.as_tensor(weight, dtype=torch.float64),
                        ]
                    )
                    packed = metric.sync(packed, "sum")
                    total, weight = packed[0], packed[1]
                metric.epoch_value = total / weight
            else:
                metric.epoch_value = (
                    metric.sync(torch.as_tensor(total), metric.reduce_fx) if metric.sync is not None else total
                )

    # -- reading --------------------------------------------------------------------------------

    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every metric, for callbacks (``ModelCheckpoint(monitor=...)``).

        Step values come from training only; validation and test contribute their epoch values.
        """
        out: dict[str, torch.Tensor] = {}
        for stage, store in self._stages.items():
            out.update(self._callback_values(store, stage == "train"))
        return out

    @staticmethod
    def _callback_values(store: dict[str, _Metric], training: bool) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for metric in store.values():
            if training and metric.on_step and metric.last is not None:
                value = as_tensor(metric.last, not metric.enable_graph)
                out[metric.step_key()] = value
                out.setdefault(metric.name, value)
            if metric.epoch_value is not None:
                value = as_tensor(metric.epoch_value, not metric.enable_graph)
                out[metric.epoch_key()] = value
                out[metric.name] = value
        return out

    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of every metric logged with ``logger=True`` (step and epoch values), as tensors."""
        out: dict[str, torch.Tensor] = {}
        for store in self._stages.values():
            out.update(self._logged_values(store))
        return out

    @staticmethod
    def _logged_values(store: dict[str, _Metric]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for metric in store.values():
            if not metric.logger:
                continue
            if metric.on_step and metric.last is not None:
                out[metric.step_key()] = as_tensor(metric.last)
            if metric.epoch_value is not None:
                out[metric.epoch_key()] = as_tensor(metric.epoch_value)
        return out

    def step_metrics(self) -> dict[str, torch.Tensor]:
        """The step values of the active stage for the loggers (of the dataloader being evaluated, if several).

        Every step value logged so far in this epoch is included, with its latest value, as Lightning does.
        """
        idx = self.dataloader_idx
        return {
            metric.step_key(): as_tensor(metric.last)
            for metric in self._active.values()
            if metric.on_step and metric.logger and metric.last is not None and metric.dataloader_idx == idx
        }

    def epoch_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """The epoch aggregates of ``stage`` for the loggers: the last dataloader's first, as Lightning orders them."""
        metrics = [m for m in self._stages.get(stage, {}).values() if m.logger and m.epoch_value is not None]
        metrics.sort(key=lambda m: -1 if m.dataloader_idx is None else m.dataloader_idx, reverse=True)
        return {m.epoch_key(): as_tensor(m.epoch_value) for m in metrics}

    def results_per_dataloader(self, stage: str, count: int) -> list[dict[str, float]]:
        """What ``validate()``/``test()`` return: per dataloader, its epoch values and those of the epoch-end hooks."""
        metrics = [m for m in self._stages.get(stage, {}).values() if m.logger and m.epoch_value is not None]
        return [
            {
                m.epoch_key(): _as_float(m.epoch_value)
                for m in metrics
                if m.dataloader_idx == idx or m.dataloader_idx is None
            }
            for idx in (range(count) if count > 1 else [None])
        ]

    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``, as numbers."""
        out: dict[str, float] = {}
        for store in self._stages.values():
            out.update(self._prog_bar_values(store))
        return out

    @staticmethod
    def _prog_bar_values(store: dict[str, _Metric]) -> dict[str, float]:
        out: dict[str, float] = {}
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
