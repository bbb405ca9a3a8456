"""Turning ``Trainer(accelerator=, devices=, strategy=, precision=, plugins=, num_nodes=)`` into one Strategy.

Rules: an instance beats a name, a name beats ``"auto"``, and a component carried by a Strategy
instance beats the separate argument (giving both is an error). Names come from the registries.
The core never tests what kind of device it has: every device-dependent choice is asked of the
accelerator plugin. Each decision is recorded with its reason, for ``trainer.describe()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from torchplug._errors import MisconfigurationError, PluginUnavailableError
from torchplug._host import PluginHost, plugin_host
from torchplug._registry import INSTALL_HINTS, Registry, unavailable_reason
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy

__all__ = ["Decision", "Resolution", "resolve"]

_PLUGIN_BASES: Final = {
    "precision": Precision,
    "checkpoint_io": CheckpointIO,
    "cluster_environment": ClusterEnvironment,
}

_BASES: Final[dict[str, type]] = {"accelerator": Accelerator, "strategy": Strategy, **_PLUGIN_BASES}


@dataclass(frozen=True)
class Decision:
    """One resolved choice: what was decided, the value chosen, and why."""

    what: str
    value: str
    why: str


@dataclass
class Resolution:
    """The outcome of resolution: the wired Strategy, and the trace of how it was chosen."""

    strategy: Strategy
    num_devices: int
    num_nodes: int
    trace: list[Decision] = field(default_factory=list)

    def describe(self) -> str:
        """The decision trace as aligned text, one line per choice."""
        width = max(len(d.what) for d in self.trace)
        return "\n".join(f"{d.what:<{width}}  {d.value}  ({d.why})" for d in self.trace)

    def as_dicts(self) -> list[dict[str, str]]:
        """The decision trace as JSON-ready data."""
        return [{"what": d.what, "value": d.value, "why": d.why} for d in self.trace]


def _interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def _label(obj: Any) -> str:
    return type(obj).__name__


class _Resolver:
    """Holds the arguments and the trace while resolving; one instance per Trainer."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.trace: list[Decision] = []

    def note(self, what: str, value: str, why: str) -> None:
        self.trace.append(Decision(what, value, why))

    def registry(self, kind: str) -> Registry:
        return self.host.registry(kind)

    # -- plugins=[...] --------------------------------------------------------------------------

    def split_plugins(self, plugins: Any) -> dict[str, Any]:
        if plugins is None:
            return {}
        items = [plugins] if isinstance(plugins, (str, type)) or not isinstance(plugins, Iterable) else list(plugins)
        found: dict[str, Any] = {}
        for item in items:
            kind, value = self._plugin_kind(item)
            if kind in found:
                raise MisconfigurationError(
                    f"plugins= holds two {kind.replace('_', ' ')} plugins: {found[kind]!r} and {value!r}. "
                    "Give at most one of each kind."
                )
            found[kind] = value
        return found

    def _plugin_kind(self, item: Any) -> tuple[str, Any]:
        if isinstance(item, type):
            item = item()
        for kind, base in _PLUGIN_BASES.items():
            if isinstance(item, base):
                return kind, item
        if isinstance(item, str):
            kinds = [k for k in _PLUGIN_BASES if item.split("@")[0].lower() in self.registry(k)]
            if len(kinds) == 1:
                return kinds[0], item
            if len(kinds) > 1:
                raise MisconfigurationError(
                    f"plugins=[{item!r}] is a name of several kinds ({', '.join(kinds)}); pass an instance instead."
                )
            names = sorted({n for k in _PLUGIN_BASES for n in self.registry(k).names()})
            raise MisconfigurationError(
                f"plugins=[{item!r}] is not a registered precision, checkpoint IO or cluster environment. "
                f"Installed: {', '.join(names)}. Hint: core plugins list"
            )
        raise MisconfigurationError(
            f"plugins=[{item!r}] has type {type(item).__name__}; expected a Precision, CheckpointIO or "
            "ClusterEnvironment instance, or one of their registered names."
        )

    def create(self, kind: str, value: Any) -> Any:
        """An instance from an instance, a class, or a registry name."""
        if isinstance(value, type) and issubclass(value, _BASES[kind]):
            return value()
        if isinstance(value, _BASES[kind]):
            return value
        if isinstance(value, str):
            return self.registry(kind).get(value)
        raise MisconfigurationError(
            f"{kind}={value!r} has type {type(value).__name__}; give a registered name or a "
            f"{_BASES[kind].__name__} instance. Installed: {', '.join(self.registry(kind).names())}."
        )

    # -- accelerator ----------------------------------------------------------------------------

    def accelerator(self, value: Any, strategy: Any) -> Accelerator:
        own = getattr(strategy, "accelerator", None) if isinstance(strategy, Strategy) else None
        if own is not None:
            if value not in ("auto", None):
                raise MisconfigurationError(
                    f"The accelerator is set twice: by strategy={_label(strategy)}(accelerator={_label(own)}) and by "
                    f"accelerator={value!r}. Choose one."
                )
            self.note("accelerator", _label(own), "given by the strategy instance")
            return own  # type: ignore[no-any-return]
        if value in ("auto", None):
            return self.auto_accelerator()
        accelerator = self.create("accelerator", value)
        if isinstance(value, str):
            entry = self.registry("accelerator").resolve(value)
            self.note("accelerator", entry.name, f"accelerator={value!r}, from {entry.provider}")
        else:
            reason = unavailable_reason(type(accelerator))
            if reason is not None:
                raise PluginUnavailableError(
                    f"accelerator={_label(accelerator)}() cannot run on this machine: {reason}"
                )
            self.note("accelerator", _label(accelerator), "given as an instance")
        return accelerator  # type: ignore[no-any-return]

    def auto_accelerator(self) -> Accelerator:
        registry = self.registry("accelerator")
        candidates: list[tuple[int, str, type]] = []
        skipped: list[str] = []
        for name in registry.names():
            winner = registry.resolution(name).winner
            if winner is None or winner.error is not None:
                skipped.append(f"{name}: not usable")
                continue
            try:
                reason = winner.unavailable_reason()  # the cheap probe first: no import when it says no
                cls = winner.load() if reason is None else None
                reason = reason or (unavailable_reason(cls, winner) if cls is not None else None)
            except Exception as exc:  # one broken accelerator never stops "auto"
                skipped.append(f"{name}: {type(exc).__name__}")
                continue
            if reason is not None or cls is None:
                skipped.append(f"{name}: unavailable")
                continue
            candidates.append((int(getattr(cls, "auto_priority", 0)), name, cls))
        if not candidates:
            raise MisconfigurationError(f"accelerator='auto' found no usable accelerator ({'; '.join(skipped)}).")
        candidates.sort(key=lambda c: (-c[0], c[1]))
        priority, name, cls = candidates[0]
        others = ", ".join(f"{n} ({p})" for p, n, _ in candidates[1:])
        why = f"accelerator='auto': highest priority available ({priority})"
        why += f"; also available: {others}" if others else ""
        why += f"; skipped: {'; '.join(skipped)}" if skipped else ""
        self.note("accelerator", name, why)
        return registry.get(name)  # type: ignore[no-any-return]

    # -- devices --------------------------------------------------------------------------------

    def devices(self, accelerator: Accelerator, devices: Any, environment: ClusterEnvironment) -> list[Any]:
        if devices in (0, "0", [], None, ""):
            raise MisconfigurationError(
                f"devices={devices!r} selects no device. Give a positive number (devices=1), a list of ids, or 'auto'."
            )
        if devices == "auto":
            scheduled = environment.processes_per_node() if environment.creates_processes_externally else None
            if scheduled:
                value: Any = scheduled
                why = f"devices='auto': {_label(environment)} started {scheduled} process(es) on this node"
            else:
                value = accelerator.auto_device_count()
                why = f"devices='auto': {_label(accelerator)}.auto_device_count()"
        else:
            value, why = devices, f"devices={devices!r}"
        try:
            parsed = accelerator.parse_devices(value)
            parallel = list(accelerator.get_parallel_devices(parsed))
        except (TypeError, ValueError) as exc:
            raise MisconfigurationError(str(exc)) from exc
        if not parallel:
            raise MisconfigurationError(f"devices={devices!r} selects no device of {_label(accelerator)}.")
        self.note("devices", ", ".join(str(d) for d in parallel), why)
        return parallel

    # -- cluster environment --------------------------------------------------------------------

    def environment(self, plugin: Any, strategy: Any) -> ClusterEnvironment:
        own = getattr(strategy, "cluster_environment", None) if isinstance(strategy, Strategy) else None
        if own is not None and plugin is not None:
            raise MisconfigurationError(
                f"The cluster environment is set twice: by strategy={_label(strategy)}(cluster_environment="
                f"{_label(own)}) and by plugins=[{plugin!r}]. Choose one."
            )
        if own is not None:
            self.note("cluster_environment", _label(own), "given by the strategy instance")
            return own  # type: ignore[no-any-return]
        if plugin is not None:
            environment = self.create("cluster_environment", plugin)
            self.note(
                "cluster_environment", plugin if isinstance(plugin, str) else _label(environment), "given in plugins="
            )
            return environment  # type: ignore[no-any-return]
        from torchplug.environments.detection import select_cluster_environment

        selection = select_cluster_environment(self.registry("cluster_environment"))
        self.note("cluster_environment", selection.name, "; ".join(selection.trace))
        return selection.environment

    # -- strategy -------------------------------------------------------------------------------

    def strategy(self, value: Any, accelerator: Accelerator, num_devices: int, num_nodes: int) -> Strategy:
        if isinstance(value, Strategy):
            self.note("strategy", _label(value), "given as an instance")
            return value
        if value in ("auto", None):
            interactive = _interactive()
            name = accelerator.default_strategy(num_devices, num_nodes, interactive)
            why = (
                f"strategy='auto': {_label(accelerator)}.default_strategy(devices={num_devices}, "
                f"num_nodes={num_nodes}{', interactive' if interactive else ''})"
            )
        elif isinstance(value, type):
            return self.create("strategy", value)  # type: ignore[no-any-return]
        else:
            name, why = value, f"strategy={value!r}"
        entry = self.registry("strategy").resolve(name)
        self.note("strategy", entry.name, f"{why}, from {entry.provider}")
        return self.registry("strategy").get(name)  # type: ignore[no-any-return]

    # -- precision ------------------------------------------------------------------------------

    def precision(self, value: Any, plugin: Any, strategy: Strategy, accelerator: Accelerator) -> Precision:
        given = [g for g in (value, plugin, strategy.precision) if g is not None]
        if len(given) > 1:
            raise MisconfigurationError(
                f"The precision is set more than once: precision={value!r}, plugins=[{plugin!r}], "
                f"strategy precision={strategy.precision!r}. Choose one."
            )
        chosen = given[0] if given else accelerator.default_precision
        if isinstance(chosen, Precision):
            self.note("precision", _label(chosen), "given as an instance")
            return chosen
        if isinstance(chosen, type):
            return self.create("precision", chosen)  # type: ignore[no-any-return]
        name = str(chosen).lower()
        registry = self.registry("precision")
        requested = registry.resolve(name).name if name in registry else name
        mapped = strategy.precision_for(accelerator.precision_for(requested))
        if not accelerator.supports_precision(mapped):
            supported = sorted(accelerator.supported_precisions or ())
            raise MisconfigurationError(
                f"precision={chosen!r} is not supported by {_label(accelerator)}. Supported: {', '.join(supported)}."
            )
        entry = registry.resolve(mapped)
        why = "default" if not given else f"precision={chosen!r}"
        if mapped != requested:
            why += f", mapped to {mapped!r} by the accelerator/strategy"
        self.note("precision", entry.name, f"{why}, from {entry.provider}")
        return registry.get(mapped)  # type: ignore[no-any-return]

    # -- checkpoint IO --------------------------------------------------------------------------

    def checkpoint_io(self, plugin: Any, strategy: Strategy, accelerator: Accelerator) -> CheckpointIO:
        if strategy.has_checkpoint_io and plugin is not None:
            raise MisconfigurationError(
                f"The checkpoint IO is set twice: by strategy={_label(strategy)}(checkpoint_io="
                f"{_label(strategy.checkpoint_io)}) and by plugins=[{plugin!r}]. Choose one."
            )
        default_name = accelerator.default_checkpoint_io or "torch"
        if default_name not in self.registry("checkpoint_io"):
            hint = INSTALL_HINTS["checkpoint_io"].get(default_name)
            self.note(
                "checkpoint_io (default)",
                "torch",
                f"{_label(accelerator)} prefers {default_name!r}, which is not installed"
                + (f"; Hint: pip install {hint}" if hint else ""),
            )
            default_name = "torch"
        if strategy.has_checkpoint_io:
            io = strategy.checkpoint_io
            self.note("checkpoint_io", _label(io), "given by the strategy instance")
        elif plugin is not None:
            io = self.create("checkpoint_io", plugin)
            self.note("checkpoint_io", plugin if isinstance(plugin, str) else _label(io), "given in plugins=")
        else:
            io = self.registry("checkpoint_io").get(default_name)
            self.note("checkpoint_io", default_name, f"default of {_label(accelerator)}")
        wrapped = getattr(io, "checkpoint_io", False)
        if wrapped is None:  # a wrapping IO (async) with nothing inside: wrap the accelerator's default
            io.checkpoint_io = self.registry("checkpoint_io").get(default_name)  # type: ignore[attr-defined]
            self.note("checkpoint_io (wrapped)", default_name, f"default of {_label(accelerator)}")
        return io  # type: ignore[no-any-return]


def resolve(
    accelerator: Any = "auto",
    devices: Any = "auto",
    strategy: Any = "auto",
    precision: Any = None,
    plugins: Any = None,
    num_nodes: int = 1,
    host: PluginHost | None = None,
) -> Resolution:
    """Resolve the Trainer's hardware arguments into one wired Strategy (see the module docstring).

    Raises:
        MisconfigurationError: Arguments that conflict or make no sense; the message names them.
        PluginError: An unknown, broken, conflicting or unavailable plugin name.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise MisconfigurationError(f"num_nodes={num_nodes!r} is not valid: give a positive int.")
    resolver = _Resolver(host or plugin_host())
    extra = resolver.split_plugins(plugins)
    if isinstance(strategy, type):
        strategy = resolver.create("strategy", strategy)
    accel = resolver.accelerator(accelerator, strategy)
    environment = resolver.environment(extra.get("cluster_environment"), strategy)
    parallel = resolver.devices(accel, devices, environment)
    num_devices = len(parallel)
    strat = resolver.strategy(strategy, accel, num_devices, num_nodes)
    strat.accelerator = strat.accelerator or accel
    strat.precision = resolver.precision(precision, extra.get("precision"), strat, accel)
    strat.checkpoint_io = resolver.checkpoint_io(extra.get("checkpoint_io"), strat, accel)
    strat.cluster_environment = strat.cluster_environment or environment
    if strat.parallel_devices is None:
        strat.parallel_devices = parallel
    strat.num_nodes = num_nodes
    _check_strategy(strat, num_devices, num_nodes)
    strat._configure_launcher()
    if strat.launcher is not None and _interactive() and not strat.launcher.is_interactive_compatible:
        raise MisconfigurationError(
            f"strategy={_label(strat)} re-launches the script, which is impossible in a notebook or REPL. "
            "Hint: use strategy='ddp_fork' (or 'ddp_notebook')."
        )
    strat.precision.connect_accelerator(strat.accelerator)
    return Resolution(strat, num_devices, num_nodes, resolver.trace)


def _check_strategy(strategy: Strategy, num_devices: int, num_nodes: int) -> None:
    if not strategy.is_distributed and num_devices * num_nodes > 1:
        parallel = strategy.accelerator.parallel_strategy if strategy.accelerator is not None else "ddp"
        raise MisconfigurationError(
            f"strategy={_label(strategy)} runs one process, but devices={num_devices} and num_nodes={num_nodes} ask "
            f"for more. Hint: use strategy={parallel!r} (or 'auto'), or devices=1."
        )
