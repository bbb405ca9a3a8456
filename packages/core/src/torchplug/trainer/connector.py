"""Turning ``Trainer(accelerator=, devices=, strategy=, precision=, plugins=, num_nodes=)`` into one Strategy.

Rules: an instance beats a name, a name beats ``"auto"``, and a component carried by a Strategy
instance beats the separate argument (giving both is an error). Names come from the registries,
and each is looked up once: the registry entry found is kept, and the instance is created from it.
The core never tests what kind of device it has: every device-dependent choice is asked of the
accelerator plugin. The parts are assembled with :meth:`Strategy.attach`. Each decision is
recorded with its reason, for ``trainer.describe()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

import torch

from torchplug._boundary import provide, why_unavailable
from torchplug._errors import MisconfigurationError, PluginUnavailableError, UnknownPluginError
from torchplug._host import PluginHost, plugin_host
from torchplug._install_hints import INSTALL_HINTS
from torchplug._registry import Registry
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.strategy import Strategy
from torchplug.utilities.devices import check_device_count
from torchplug.utilities.warn import warn_once

__all__ = [
    "AcceleratorArg",
    "Decision",
    "DevicesArg",
    "PluginArg",
    "PluginsArg",
    "PrecisionArg",
    "Resolution",
    "StrategyArg",
    "resolve",
]

#: What ``Trainer(accelerator=)`` accepts: a registered name (``"auto"`` included) or an instance.
AcceleratorArg: TypeAlias = str | Accelerator
#: What ``Trainer(strategy=)`` accepts: a registered name (``"auto"`` included) or an instance.
StrategyArg: TypeAlias = str | Strategy
#: What ``Trainer(precision=)`` accepts: a registered name or alias (``"bf16-mixed"``, ``16``), an instance, or None.
PrecisionArg: TypeAlias = str | int | Precision | None
#: What ``Trainer(devices=)`` accepts: a count, ``"auto"``, a string such as ``"0,2"``, or device indices.
DevicesArg: TypeAlias = int | str | Sequence[int]
#: One item of ``Trainer(plugins=)``: a registered name, or a precision, checkpoint IO or cluster environment.
PluginArg: TypeAlias = str | Precision | CheckpointIO | ClusterEnvironment
#: What ``Trainer(plugins=)`` accepts: one :data:`PluginArg`, several (at most one of each kind), or None.
PluginsArg: TypeAlias = PluginArg | Iterable[PluginArg] | None

_PLUGIN_BASES: Final[dict[str, type]] = {
    "precision": Precision,
    "checkpoint_io": CheckpointIO,
    "cluster_environment": ClusterEnvironment,
}

#: The Trainer arguments that take the other registered kinds, for the hint when one is given in ``plugins=``.
_OTHER_ARGUMENTS: Final = ("strategy", "accelerator", "logger")


def _refuse_a_missing_first_party_name(item: str, key: str) -> None:
    """Raise the install hint for ``plugins=[item]`` when ``key`` is a first-party name of a package not installed.

    Raises:
        MisconfigurationError: ``key`` names a plugin of a first-party package (``slurm``: env-slurm).
    """
    for kind in (*_PLUGIN_BASES, *_OTHER_ARGUMENTS):
        distribution = INSTALL_HINTS.get(kind, {}).get(key)
        if distribution is None:
            continue
        label = kind.replace("_", " ")
        if kind in _OTHER_ARGUMENTS:
            raise MisconfigurationError(
                f"plugins=[{item!r}] is not valid: {key!r} is the {label} of {distribution}, which is not installed, "
                f"and plugins= takes precisions, checkpoint IOs and cluster environments. Hint: pip install "
                f"{distribution}, then Trainer({kind}={item!r})."
            )
        raise MisconfigurationError(
            f"plugins=[{item!r}]: {key!r} is the {label} of {distribution}, which is not installed. "
            f"Hint: pip install {distribution}"
        )


@dataclass(frozen=True)
class Decision:
    """One resolved choice: what was decided, the value chosen, why, and the alternatives that lost (and why)."""

    what: str
    value: str
    why: str
    details: tuple[str, ...] = ()


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
        lines = []
        for d in self.trace:
            lines.append(f"{d.what:<{width}}  {d.value}  ({d.why})")
            lines.extend(f"{'':<{width}}    - {detail}" for detail in d.details)
        return "\n".join(lines)

    def summary(self) -> str:
        """One line for the log: the accelerator, devices, strategy and precision this run uses.

        When torch reports an accelerator device here that the run does not use (``accelerator="cpu"``
        on a machine with a GPU, or a plugin of another device chosen), the line says so: the choice
        is honoured, and the unused device is named. ``trainer.describe()`` tells why each was chosen.
        """
        values = {d.what: d.value for d in self.trace}
        try:
            devices = self.strategy.parallel_devices or [self.strategy.root_device]
        except Exception:  # a backend that knows its device only once set up: a log line must not fail a Trainer
            devices = []
        types = sorted({d.type for d in devices})
        number = len(devices) or self.num_devices
        count = f"{number} device{'s' if number != 1 else ''}" + (f" ({', '.join(types)})" if types else "")
        nodes = f" on each of {self.num_nodes} nodes" if self.num_nodes > 1 else ""
        line = (
            f"Trainer: accelerator {values.get('accelerator', '?')!r}, {count}{nodes}, strategy "
            f"{values.get('strategy', '?')!r}, precision {values.get('precision', '?')!r}."
        )
        unused = unused_device_type(types)
        if unused is not None:
            line += (
                f" torch reports {unused[1]} {unused[0]!r} device(s) here, which this run does not use. "
                "Hint: accelerator='auto' chooses the best available one; trainer.describe() tells why."
            )
        return line

    def as_dicts(self) -> list[dict[str, Any]]:
        """The decision trace as JSON-ready data (``details``: the alternatives that lost, and why)."""
        return [{"what": d.what, "value": d.value, "why": d.why, "details": list(d.details)} for d in self.trace]


def unused_device_type(used: Sequence[str]) -> tuple[str, int] | None:
    """``(type, count)`` of torch's accelerator device when it has devices here and none is in ``used``; else None.

    Asked of ``torch.accelerator`` only when the run does not use its device type, so a run on that
    device never pays for it. Whatever torch raises here means "nothing to report": this is a note,
    and a run must never fail for it.
    """
    from torchplug.accelerators.torch_device import current_device_type

    try:
        device_type = current_device_type()
        if device_type is None or device_type in used:
            return None
        count = int(torch.accelerator.device_count())
    except Exception:  # a broken device backend: it is reported where it is chosen, not in a log line
        return None
    return (device_type, count) if count > 0 else None


def _positions(devices: Sequence[Any]) -> list[tuple[str, int]]:
    """``(type, index)`` of each device, a device without an index counting as index 0."""
    return [(d.type, d.index or 0) for d in devices]


def _interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def _label(obj: object) -> str:
    return type(obj).__name__


@runtime_checkable
class _WrappingIO(Protocol):
    """A checkpoint IO that delegates to another one (``async``); None inside means "the default one"."""

    checkpoint_io: CheckpointIO | None


class _Resolver:
    """Holds the arguments and the trace while resolving; one instance per Trainer."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.trace: list[Decision] = []

    def note(self, what: str, value: str, why: str, details: tuple[str, ...] = ()) -> None:
        self.trace.append(Decision(what, value, why, details))

    # -- plugins=[...] --------------------------------------------------------------------------

    def split_plugins(self, plugins: PluginsArg) -> dict[str, Any]:
        """``plugins=`` sorted by kind: an instance, or a name (looked up when it is created)."""
        if plugins is None:
            return {}
        items = [plugins] if isinstance(plugins, (str, type)) or not isinstance(plugins, Iterable) else list(plugins)
        found: dict[str, Any] = {}
        for item in items:
            kind, value = self._plugin_kind(item)
            if kind in found:
                raise MisconfigurationError(
                    f"plugins= holds two {kind.replace('_', ' ')} plugins: {found[kind]!r} and {value!r}. "
                    "Give at most one of each kind. Hint: keep the one you mean, and remove the other."
                )
            found[kind] = value
        return found

    def _plugin_kind(self, item: object) -> tuple[str, object]:
        if isinstance(item, type):
            item = item()
        for kind, base in _PLUGIN_BASES.items():
            if isinstance(item, base):
                return kind, item
        if isinstance(item, str):
            key = item.split("@")[0].lower()
            kinds = [k for k in _PLUGIN_BASES if key in self.host.registry(k)]
            if len(kinds) == 1:
                return kinds[0], item
            if len(kinds) > 1:
                raise MisconfigurationError(
                    f"plugins=[{item!r}] is a name of several kinds ({', '.join(kinds)}); pass an instance instead."
                )
            for argument in _OTHER_ARGUMENTS:
                if key in self.host.registry(argument):
                    raise MisconfigurationError(
                        f"plugins=[{item!r}] is not valid: {item!r} is a registered {argument}, and plugins= takes "
                        f"precisions, checkpoint IOs and cluster environments. Hint: Trainer({argument}={item!r})."
                    )
            _refuse_a_missing_first_party_name(item, key)
            names = sorted({n for k in _PLUGIN_BASES for n in self.host.registry(k).names()})
            raise MisconfigurationError(
                f"plugins=[{item!r}] is not a registered precision, checkpoint IO or cluster environment. "
                f"Installed: {', '.join(names)}. Hint: core plugins list"
            )
        for argument, base in (("strategy", Strategy), ("accelerator", Accelerator)):
            if isinstance(item, base):
                raise MisconfigurationError(
                    f"plugins=[{item!r}] is not valid: it is a {base.__name__}, and plugins= takes precisions, "
                    f"checkpoint IOs and cluster environments. Hint: Trainer({argument}={_label(item)}(...))."
                )
        raise MisconfigurationError(
            f"plugins=[{item!r}] has type {type(item).__name__}; expected a Precision, CheckpointIO or "
            "ClusterEnvironment instance, or one of their registered names."
        )

    # -- accelerator ----------------------------------------------------------------------------

    def accelerator(self, value: object, strategy: object) -> Accelerator:
        own = strategy.accelerator if isinstance(strategy, Strategy) else None
        if own is not None:
            if value not in ("auto", None):
                raise MisconfigurationError(
                    f"The accelerator is set twice: by strategy={_label(strategy)}(accelerator={_label(own)}) and by "
                    f"accelerator={value!r}. Choose one."
                )
            self.note("accelerator", _label(own), "given by the strategy instance")
            return own
        if value in ("auto", None):
            return self.auto_accelerator()
        if isinstance(value, str):
            return self.named_accelerator(value)
        provided = provide(self.host.registry("accelerator"), value, check_instance=True)
        accelerator = provided.instance
        if provided.unavailable is not None:
            raise PluginUnavailableError(
                f"accelerator={_label(accelerator)}() cannot run on this machine: {provided.unavailable}"
            )
        self.note("accelerator", _label(accelerator), "given as an instance")
        return accelerator

    def auto_accelerator(self) -> Accelerator:
        """``accelerator="auto"``: see :mod:`torchplug.trainer.auto_accelerator` (warnings, ties, every candidate)."""
        from torchplug.trainer.auto_accelerator import choose

        choice = choose(self.host.registry("accelerator"))
        self.note("accelerator", choice.winner.name, choice.why, choice.details)
        return choice.create()  # its availability was checked while choosing

    def named_accelerator(self, value: str) -> Accelerator:
        """A registered accelerator name, else torch's current device type served by the generic accelerator."""
        registry = self.host.registry("accelerator")
        try:
            provided = provide(registry, value)
        except UnknownPluginError as unknown:
            from torchplug.accelerators.torch_device import NAME, resolve_device_type

            cls = resolve_device_type(value, unknown)
            reason = why_unavailable(cls)
            if reason is not None:
                raise PluginUnavailableError(
                    f"accelerator={value!r} is torch's device type, but the generic accelerator cannot serve it: "
                    f"{reason}"
                ) from None
            generic = registry.resolve(NAME)
            self.note(
                "accelerator",
                cls.device_type,
                f"accelerator={value!r}: torch's device type, served by "
                f"the generic accelerator {NAME!r} from {generic.provider}",
            )
            return cls()
        self.note("accelerator", provided.name, f"accelerator={value!r}, from {provided.provider}")
        return provided.instance

    # -- devices --------------------------------------------------------------------------------

    def devices(self, accelerator: Accelerator, devices: object, environment: ClusterEnvironment) -> list[Any]:
        if devices in (0, "0", [], None, ""):
            raise MisconfigurationError(
                f"devices={devices!r} selects no device. Give a positive number (devices=1), a list of ids, or 'auto'."
            )
        if devices == "auto":
            scheduled = environment.processes_per_node() if environment.creates_processes_externally else None
            if scheduled:
                value: object = scheduled
                why = f"devices='auto': {_label(environment)} started {scheduled} process(es) on this node"
            else:
                value = accelerator.auto_device_count()
                why = f"devices='auto': {_label(accelerator)}.auto_device_count()"
        else:
            value, why = devices, f"devices={devices!r}"
        try:
            parsed = accelerator.parse_devices(value)
            if devices != "auto":
                check_device_count(accelerator, parsed, devices)
            parallel = list(accelerator.get_parallel_devices(parsed))
        except (TypeError, ValueError) as exc:
            raise MisconfigurationError(str(exc)) from exc
        if not parallel:
            raise MisconfigurationError(f"devices={devices!r} selects no device of {_label(accelerator)}.")
        self.note("devices", ", ".join(str(d) for d in parallel), why)
        return parallel

    def strategy_devices(
        self, strategy: object, accelerator: Accelerator, devices: object, parallel: list[Any]
    ) -> list[Any]:
        """The devices a strategy instance was constructed with, checked here rather than when the run starts.

        Each must be a device of the accelerator (of the type its ``get_parallel_devices`` gives;
        its index is checked after :meth:`Strategy.attach`, see :func:`_check_own_device_ids`).
        ``devices=`` may be ``"auto"``, their number, or their ids; other devices would be ignored
        (as Lightning ignores them): that is an error naming both.
        """
        own = strategy.own_devices if isinstance(strategy, Strategy) else None
        if not own:
            return parallel
        label, shown = f"strategy={_label(strategy)}", ", ".join(str(d) for d in own)
        foreign = [d for d in own if d.type not in {p.type for p in parallel}]
        if foreign:
            raise MisconfigurationError(
                f"{label} was made for device {str(foreign[0])!r}, which is not a device of {_label(accelerator)} "
                f"(its devices here: {', '.join(str(p) for p in parallel)}). Hint: give the strategy one of those, "
                f"or choose the accelerator of {foreign[0].type!r} devices."
            )
        names_ids = isinstance(devices, (list, tuple)) or (isinstance(devices, str) and "," in devices)
        if devices != "auto" and (len(own) != len(parallel) or (names_ids and _positions(own) != _positions(parallel))):
            raise MisconfigurationError(
                f"The devices are set twice: by {label}, made for {shown}, and by devices={devices!r}, which selects "
                f"{', '.join(str(p) for p in parallel)}. Choose one. Hint: leave devices='auto' when the strategy "
                "names its devices, or make the strategy without them."
            )
        self.trace[:] = [d for d in self.trace if d.what != "devices"]
        self.note("devices", shown, "given by the strategy instance")
        return list(own)

    # -- cluster environment --------------------------------------------------------------------

    def environment(self, plugin: object, strategy: object) -> ClusterEnvironment:
        own = strategy.cluster_environment if isinstance(strategy, Strategy) else None
        if own is not None and plugin is not None:
            raise MisconfigurationError(
                f"The cluster environment is set twice: by strategy={_label(strategy)}(cluster_environment="
                f"{_label(own)}) and by plugins=[{plugin!r}]. Choose one."
            )
        if own is not None:
            self.note("cluster_environment", _label(own), "given by the strategy instance")
            return own
        registry = self.host.registry("cluster_environment")
        if plugin is not None:
            environment = provide(registry, plugin).instance
            self.note(
                "cluster_environment", plugin if isinstance(plugin, str) else _label(environment), "given in plugins="
            )
            return environment
        from torchplug.environments.detection import select_cluster_environment

        selection = select_cluster_environment(registry)
        self.note("cluster_environment", selection.name, "; ".join(selection.trace))
        return selection.environment

    # -- strategy -------------------------------------------------------------------------------

    def strategy(self, value: object, accelerator: Accelerator, num_devices: int, num_nodes: int) -> Strategy:
        if isinstance(value, Strategy):
            self.note("strategy", _label(value), "given as an instance")
            return value
        registry = self.host.registry("strategy")
        if value in ("auto", None):
            interactive = _interactive()
            name = accelerator.default_strategy(num_devices, num_nodes, interactive)
            why = (
                f"strategy='auto': {_label(accelerator)}.default_strategy(devices={num_devices}, "
                f"num_nodes={num_nodes}{', interactive' if interactive else ''})"
            )
        elif isinstance(value, str):
            name, why = value, f"strategy={value!r}"
        else:
            strategy = provide(registry, value).instance  # a Strategy class, or an error naming the type
            self.note("strategy", _label(strategy), "given as a class")
            return strategy
        provided = provide(registry, name)
        self.note("strategy", provided.name, f"{why}, from {provided.provider}")
        return provided.instance

    # -- precision ------------------------------------------------------------------------------

    def precision(self, value: object, plugin: object, strategy: Strategy, accelerator: Accelerator) -> Precision:
        sources = (
            (f"precision={value!r}", value),
            (f"plugins=[{plugin!r}]", plugin),
            (f"strategy={_label(strategy)}(precision={strategy.precision!r})", strategy.precision),
        )
        given = [g for _, g in sources if g is not None]
        if len(given) > 1:
            raise MisconfigurationError(
                "The precision is set more than once: "
                + ", ".join(label for label, g in sources if g is not None)
                + ". Choose one. Hint: keep precision= alone (a name or a Precision instance)."
            )
        chosen = given[0] if given else accelerator.default_precision
        if isinstance(chosen, bool) or not isinstance(chosen, (str, int, type, Precision)):
            raise MisconfigurationError(
                f"precision={chosen!r} has type {type(chosen).__name__}; give a registered name or alias "
                "('bf16-mixed', '16-mixed', '32-true', 16, 32, 64...) or a Precision instance. Hint: core plugins list "
                "--kind precision"
            )
        if isinstance(chosen, Precision):
            self.note("precision", _label(chosen), "given as an instance")
            return chosen
        registry = self.host.registry("precision")
        if isinstance(chosen, type):
            precision = provide(registry, chosen).instance
            self.note("precision", _label(precision), "given as a class")
            return precision
        mapped: list[str] = []

        def supported(requested: str) -> str:
            """The precision the accelerator and the strategy run for ``requested``, refused if unsupported."""
            mapped.append(strategy.precision_for(accelerator.precision_for(requested)))
            if not accelerator.supports_precision(mapped[0]):
                names = sorted(accelerator.supported_precisions or ())
                raise MisconfigurationError(
                    f"precision={chosen!r} is not supported by {_label(accelerator)}. Supported: {', '.join(names)}."
                )
            return mapped[0]

        provided = provide(registry, str(chosen).lower(), rename=supported)
        why = "default" if not given else f"precision={chosen!r}"
        if mapped[0] != provided.requested:
            why += f", mapped to {mapped[0]!r} by the accelerator/strategy"
        self.note("precision", provided.name, f"{why}, from {provided.provider}")
        return provided.instance

    # -- checkpoint IO --------------------------------------------------------------------------

    def checkpoint_io(self, plugin: object, strategy: Strategy, accelerator: Accelerator) -> CheckpointIO:
        if strategy.has_checkpoint_io and plugin is not None:
            raise MisconfigurationError(
                f"The checkpoint IO is set twice: by strategy={_label(strategy)}(checkpoint_io="
                f"{_label(strategy.checkpoint_io)}) and by plugins=[{plugin!r}]. Choose one."
            )
        default_name = strategy.default_checkpoint_io or accelerator.default_checkpoint_io or "torch"
        default_of = _label(strategy) if strategy.default_checkpoint_io else _label(accelerator)
        given = strategy.checkpoint_io if strategy.has_checkpoint_io else plugin
        provided = provide(self.host.registry("checkpoint_io"), given, default=default_name, fallback="torch")
        fallback: str | None = None  # why the core's IO stands in for the preferred one, said once it is used
        if provided.missing is not None:
            fallback = f"{default_of} prefers the checkpoint IO {provided.missing!r}, which is not installed" + (
                f". Hint: pip install {provided.hint}" if provided.hint else ""
            )
            self.note("checkpoint_io (default)", "torch", fallback)
        io = provided.instance
        if strategy.has_checkpoint_io:
            self.note("checkpoint_io", _label(io), "given by the strategy instance")
        elif plugin is not None:
            self.note("checkpoint_io", plugin if isinstance(plugin, str) else _label(io), "given in plugins=")
        else:
            self.note("checkpoint_io", str(provided.default), f"default of {default_of}")
        if isinstance(io, _WrappingIO) and io.checkpoint_io is None:  # a wrapper with nothing inside
            io.checkpoint_io = provided.create_default()
            self.note("checkpoint_io (wrapped)", str(provided.default), f"default of {default_of}")
        elif given is not None:
            fallback = None  # the IO given is used, not the default
        if fallback is not None:
            warn_once(f"Checkpoints are written with the core's 'torch' checkpoint IO: {fallback}")
        return io


def resolve(
    accelerator: AcceleratorArg | None = "auto",
    devices: DevicesArg | None = "auto",
    strategy: StrategyArg | None = "auto",
    precision: PrecisionArg = None,
    plugins: PluginsArg = None,
    num_nodes: int = 1,
    host: PluginHost | None = None,
) -> Resolution:
    """Resolve the Trainer's hardware arguments into one Strategy, assembled with :meth:`Strategy.attach`.

    See the module docstring for the rules. Classes are accepted wherever an instance is, and are
    instantiated without arguments.

    Raises:
        MisconfigurationError: Arguments that conflict or make no sense; the message names them.
        PluginError: An unknown, broken, conflicting or unavailable plugin name.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise MisconfigurationError(f"num_nodes={num_nodes!r} is not valid: give a positive int.")
    resolver = _Resolver(host or plugin_host())
    extra = resolver.split_plugins(plugins)
    given_strategy: object = strategy
    if isinstance(given_strategy, type):
        given_strategy = provide(resolver.host.registry("strategy"), given_strategy).instance
    accel = resolver.accelerator(accelerator, given_strategy)
    environment = resolver.environment(extra.get("cluster_environment"), given_strategy)
    parallel = resolver.devices(accel, devices, environment)
    parallel = resolver.strategy_devices(given_strategy, accel, devices, parallel)
    num_devices = len(parallel)
    strat = resolver.strategy(given_strategy, accel, num_devices, num_nodes)
    chosen_precision = resolver.precision(precision, extra.get("precision"), strat, accel)
    io = resolver.checkpoint_io(extra.get("checkpoint_io"), strat, accel)
    _check_strategy(strat, strat.accelerator or accel, num_devices, num_nodes)
    _check_external_processes(strat, environment, num_devices, num_nodes, resolver.host.registry("cluster_environment"))
    strat.attach(
        accelerator=accel,
        precision=chosen_precision,
        checkpoint_io=io,
        cluster_environment=environment,
        parallel_devices=parallel,
        num_nodes=num_nodes,
    )
    _check_own_device_ids(given_strategy, strat.accelerator or accel)
    if strat.launcher is not None and _interactive() and not strat.launcher.is_interactive_compatible:
        raise MisconfigurationError(
            f"strategy={_label(strat)} re-launches the script, which is impossible in a notebook or REPL. "
            "Hint: use strategy='ddp_fork' (or 'ddp_notebook')."
        )
    return Resolution(strat, num_devices, num_nodes, resolver.trace)


def _check_strategy(strategy: Strategy, accelerator: Accelerator, num_devices: int, num_nodes: int) -> None:
    if not strategy.is_distributed and num_devices * num_nodes > 1:
        raise MisconfigurationError(
            f"strategy={_label(strategy)} runs one process, but devices={num_devices} and num_nodes={num_nodes} ask "
            f"for more. Hint: use strategy={accelerator.parallel_strategy!r} (or 'auto'), or devices=1."
        )


def _check_own_device_ids(strategy: object, accelerator: Accelerator) -> None:
    """Refuse a strategy made for a device id beyond ``accelerator.auto_device_count()`` (asked after ``attach``).

    After ``attach``, so that a strategy's own check of its devices (in ``configure_launcher``) speaks first.
    """
    own = strategy.own_devices if isinstance(strategy, Strategy) else None
    if not own or accelerator.devices_are_processes:
        return
    count = int(accelerator.auto_device_count())
    beyond = [d for d in own if (d.index or 0) >= count]
    if beyond:
        raise MisconfigurationError(
            f"strategy={_label(strategy)} was made for device {str(beyond[0])!r}, but "
            f"{_label(accelerator)}.auto_device_count() reports {count} on this machine. Hint: give the strategy a "
            f"device index from 0 to {count - 1}."
        )


def _check_external_processes(
    strategy: Strategy,
    environment: ClusterEnvironment,
    num_devices: int,
    num_nodes: int,
    registry: Registry[ClusterEnvironment],
) -> None:
    """Check ``devices=``/``num_nodes=`` against the processes a launcher or scheduler already started.

    A distributed strategy: the environment's ``validate_settings`` (``devices=4`` under
    ``--ntasks-per-node=2``), now rather than when ``fit`` starts. A one-process strategy under
    ``srun -n 2`` or ``torchrun --nproc-per-node 2`` (``devices=1``) makes every process a world
    of one: each trains alone as global rank 0, on the same data, writing the same checkpoint and
    log files. Lightning runs that without a word; it is warned about here, with the processes the
    launcher started and the two ways out.
    """
    if not environment.creates_processes_externally:
        return
    if strategy.is_distributed:
        environment.validate_settings(num_devices, num_nodes)
        return
    started = environment.world_size()
    if started <= 1:
        return
    per_node = environment.processes_per_node()
    warn_once(
        f"devices={num_devices} with strategy={_label(strategy)} runs one process, but {_label(environment)} started "
        f"{started} processes "
        f"(world size {started}"
        + (f", {per_node} on this node" if per_node else "")
        + "): each of them trains on its own as global rank 0, on the same data, writing the same checkpoints "
        "and logs. Hint: use devices='auto' (or devices="
        + str(per_node or started)
        + ") so that they train together, or, if the processes are meant to be independent runs, "
        "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS="
        + _registered_name(registry, environment)
        + " and a default_root_dir of their own."
    )


def _registered_name(registry: Registry[Any], obj: object) -> str:
    """The registry name of ``obj``'s class, for hints (its class name when no loaded entry targets it)."""
    for entry in registry.entries():
        if entry.is_loaded and entry.load() is type(obj):
            return entry.name
    return _label(obj)
