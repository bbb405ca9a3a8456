"""One registry implementation shared by the five plugin kinds.

A registry maps names (and aliases) to lazy ``"module:Class"`` targets. Nothing is imported until
a name is used. Each entry records the distribution that provided it.

Name conflicts follow one documented rule (also in the README):

1. ``name@provider`` always picks that provider's entry (provider: distribution or entry-point name).
2. An entry registered at run time with ``override=True`` wins.
3. ``TORCHPLUG_PREFER=name=provider`` picks a provider for that name.
4. The core's built-in keeps its name against third-party plugins (theirs are listed as shadowed).
5. Otherwise two distributions claiming one name is a conflict: the listing shows both, and
   asking for the name raises :class:`PluginConflictError`, naming both and the ways to pick one.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from torchplug._errors import (
    BrokenPluginError,
    PluginConflictError,
    PluginUnavailableError,
    UnknownPluginError,
)

if TYPE_CHECKING:
    from torchplug._discovery import PluginRecord

__all__ = [
    "BASE_CLASSES",
    "INSTALL_HINTS",
    "KINDS",
    "Provider",
    "Registry",
    "RegistryEntry",
]

#: The five plugin kinds, in the order they are listed.
KINDS: Final = ("accelerator", "strategy", "precision", "checkpoint_io", "cluster_environment")

#: The base class each kind's targets must subclass (imported only when a target is loaded).
BASE_CLASSES: Final[dict[str, str]] = {
    "accelerator": "torchplug.accelerators.accelerator:Accelerator",
    "strategy": "torchplug.strategies.strategy:Strategy",
    "precision": "torchplug.precision.precision:Precision",
    "checkpoint_io": "torchplug.io.checkpoint_io:CheckpointIO",
    "cluster_environment": "torchplug.environments.cluster_environment:ClusterEnvironment",
}

#: First-party names that live in a separate distribution: the hint for an unknown name.
INSTALL_HINTS: Final[dict[str, dict[str, str]]] = {
    "accelerator": {
        "cuda": "accel-cuda",
        "gpu": "accel-cuda",
        "tpu": "accel-tpu",
        "xla": "accel-tpu",
        "ipu": "accel-ipu",
        "hpu": "accel-hpu",
    },
    "strategy": {
        "xla": "accel-tpu",
        "single_xla": "accel-tpu",
        "xla_fsdp": "accel-tpu",
        "ipu": "accel-ipu",
        "hpu_single": "accel-hpu",
        "hpu_parallel": "accel-hpu",
    },
    "precision": {
        "xla-32-true": "accel-tpu",
        "xla-bf16-true": "accel-tpu",
        "xla-16-true": "accel-tpu",
        "ipu-32-true": "accel-ipu",
        "ipu-16-mixed": "accel-ipu",
        "ipu-16-true": "accel-ipu",
        "hpu-bf16-mixed": "accel-hpu",
        "hpu-fp8": "accel-hpu",
        "fp8": "accel-hpu",
    },
    "checkpoint_io": {"xla": "io-xla"},
    "cluster_environment": {"slurm": "env-slurm", "xla_runtime": "accel-tpu"},
}

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_SEPARATORS: Final = re.compile(r"[-_.]+")


def canonicalize_name(name: str) -> str:
    """A distribution name in its normalised form (PEP 503): ``Vendor_A`` and ``vendor-a`` are one name."""
    return _SEPARATORS.sub("-", name).lower()


_TARGET_RE: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True, slots=True)
class Provider:
    """Who registered an entry: a plugin (entry point) of a distribution, the core, or user code.

    Attributes:
        plugin: The entry-point name, ``"builtin"`` for the core, or ``"runtime"`` for user code.
        distribution: The distribution's name as published (None for user code).
        version: The distribution's version (None for user code).
        builtin: True for the core's own plugins.
    """

    plugin: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False

    def __str__(self) -> str:
        if self.distribution is None:
            return "user code (registered at run time)" if self.plugin == "runtime" else f"module {self.plugin}"
        suffix = ", built-in" if self.builtin else ""
        return f"{self.distribution} {self.version}{suffix}"

    @property
    def label(self) -> str:
        """``distribution==version``, or ``runtime`` for user code."""
        return f"{self.distribution}=={self.version}" if self.distribution else self.plugin

    def matches(self, token: str) -> bool:
        """Whether ``token`` names this provider (distribution name in any spelling, or plugin name)."""
        if token == self.plugin:
            return True
        return self.distribution is not None and canonicalize_name(token) == canonicalize_name(self.distribution)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, used by ``core plugins list --json``."""
        return {
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
        }


#: The provider of entries registered by user code outside any plugin.
RUNTIME: Final = Provider("runtime")


@dataclass(eq=False, slots=True)
class RegistryEntry:
    """One registered name: where its class lives, how to build it, and who provided it.

    Attributes:
        kind: One of :data:`KINDS`.
        name: The registered name (lower case).
        target: A ``"module:Class"`` path, or the class itself.
        description: One line for the listing.
        aliases: Other names that resolve to this entry.
        init_params: Keyword arguments passed to the class on creation.
        provider: Who registered it.
        probe: Optional cheap availability check, ``"module:function"`` or a callable, that returns
            None when the entry can run here or a reason why not. It must not import torch.
        override: Registered at run time with ``override=True`` (wins any conflict).
        error: Why the entry is broken (its plugin's hook raised, or its target failed to import).
    """

    kind: str
    name: str
    target: str | type
    description: str = ""
    aliases: tuple[str, ...] = ()
    init_params: dict[str, Any] = field(default_factory=dict)
    provider: Provider = RUNTIME
    probe: str | Callable[[], str | None] | None = None
    override: bool = False
    error: BaseException | None = None
    _cls: type | None = None

    @property
    def target_path(self) -> str:
        """The target as ``module:Class`` text, whether registered lazily or as a class."""
        if isinstance(self.target, str):
            return self.target
        return f"{self.target.__module__}:{self.target.__qualname__}"

    @property
    def is_loaded(self) -> bool:
        """Whether the target class has been imported already."""
        return self._cls is not None or not isinstance(self.target, str)

    def load(self) -> type:
        """Import and return the target class, checking that it subclasses the kind's base class.

        Raises:
            BrokenPluginError: The import failed or the target is not a class of the right kind;
                the message names the distribution and the cause is chained.
        """
        if self._cls is not None:
            return self._cls
        if self.error is not None:
            raise self._broken(self.error)
        try:
            cls = self.target if isinstance(self.target, type) else _import_target(self.target)
            base = _import_target(BASE_CLASSES[self.kind])
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{self.target_path} is {cls!r}, not a subclass of {base.__module__}.{base.__name__}")
        except Exception as exc:
            self.error = exc
            raise self._broken(exc) from exc
        self._cls = cls
        return cls

    def create(self, **overrides: Any) -> Any:
        """Build a new instance with the registered init params, updated by ``overrides``."""
        cls = self.load()
        params = {**self.init_params, **overrides}
        try:
            return cls(**params)
        except TypeError as exc:
            raise TypeError(
                f"Could not create {self.kind} {self.name!r} ({self.target_path}) from {self.provider} "
                f"with {params}: {exc}"
            ) from exc

    def unavailable_reason(self) -> str | None:
        """Run the cheap probe, if any: None when available, else the reason. Never imports the target."""
        if self.probe is None:
            return None
        probe = _import_target(self.probe) if isinstance(self.probe, str) else self.probe
        result = probe()
        return None if result is None else str(result)

    def _broken(self, exc: BaseException) -> BrokenPluginError:
        return BrokenPluginError(
            f"{_KIND_LABEL[self.kind]} {self.name!r} from {self.provider} is broken: "
            f"{type(exc).__name__}: {exc}. Hint: reinstall or upgrade {self.provider.distribution or 'it'}, "
            f"or block it with TORCHPLUG_BLOCK_PLUGINS={self.provider.distribution or self.provider.plugin}."
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, used by ``core plugins list --json``."""
        return {
            "kind": self.kind,
            "name": self.name,
            "aliases": list(self.aliases),
            "target": self.target_path,
            "description": self.description,
            "init_params": {k: _jsonable(v) for k, v in self.init_params.items()},
            "provider": self.provider.as_dict(),
        }


_KIND_LABEL: Final = {
    "accelerator": "Accelerator",
    "strategy": "Strategy",
    "precision": "Precision",
    "checkpoint_io": "Checkpoint IO",
    "cluster_environment": "Cluster environment",
}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _import_target(path: str) -> Any:
    module_name, _, attr_path = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    return obj


class RegistryHost(Protocol):
    """What a registry needs from the plugin host that owns it (discovery state and settings)."""

    def ensure_loaded(self) -> None:
        """Run discovery if it has not run yet."""

    def current_provider(self) -> Provider | None:
        """The plugin being loaded right now, or None outside discovery."""

    def failed_plugins(self) -> list[PluginRecord]:
        """Plugins that were found but did not load (broken, incompatible, blocked, ...)."""

    def preferred_provider(self, name: str) -> str | None:
        """The provider ``TORCHPLUG_PREFER`` picks for ``name``, if any."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """How one name resolves: the winning entry (None when ambiguous) and all candidates."""

    winner: RegistryEntry | None
    candidates: tuple[RegistryEntry, ...]
    rule: str


class Registry:
    """Names of one plugin kind, mapped to lazily imported classes.

    Plugins fill it through their registration hook; user code may register too. Lookups run
    plugin discovery first (once per process).

    Example:
        >>> registry.register("xpu", "torchplug_xpu.accelerator:XPUAccelerator", description="Intel GPUs")
        >>> accelerator = registry.get("xpu")
    """

    def __init__(self, kind: str, host: RegistryHost | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"Unknown plugin kind {kind!r}; expected one of {', '.join(KINDS)}")
        self.kind: Final = kind
        self._host = host
        self._entries: list[RegistryEntry] = []
        self._index: dict[str, list[RegistryEntry]] | None = None

    def __repr__(self) -> str:
        return f"<Registry {self.kind}: {len(self._entries)} entries>"

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        name: str,
        target: str | type | None = None,
        description: str = "",
        override: bool = False,
        *,
        aliases: tuple[str, ...] | list[str] = (),
        probe: str | Callable[[], str | None] | None = None,
        **init_params: Any,
    ) -> Any:
        """Register ``name`` for the class at ``target`` (``"module:Class"`` or the class itself).

        Args:
            name: The name users pass, for example ``Trainer(accelerator="xpu")``.
            target: A ``"module:Class"`` path (imported on first use) or a class. When None, returns
                a decorator that registers the class it decorates.
            description: One line shown by ``core plugins list``.
            override: Replace an existing entry of the same name. From user code, this also wins
                over plugins' entries of that name.
            aliases: Other names that resolve to this entry.
            probe: Optional cheap availability check (``"module:function"`` or a callable) that
                returns None when usable here, or the reason it is not. It must not import torch.
            **init_params: Keyword arguments given to the class when an instance is created.

        Raises:
            TypeError: ``name`` or ``target`` has the wrong type or form.
            ValueError: ``name`` is already registered by the same provider (or, from user code,
                by anyone) and ``override`` is False.
        """
        if target is None:

            def decorator(cls: type) -> type:
                self.register(name, cls, description, override, aliases=aliases, probe=probe, **init_params)
                return cls

            return decorator
        provider = self._provider()
        entry = RegistryEntry(
            kind=self.kind,
            name=_check_name(name, "name"),
            target=_check_target(target),
            description=description,
            aliases=tuple(_check_name(a, "alias") for a in aliases),
            init_params=dict(init_params),
            provider=provider,
            probe=probe,
            override=override and provider is RUNTIME,
        )
        self._add(entry, override)
        return target

    def _provider(self) -> Provider:
        current = self._host.current_provider() if self._host else None
        if current is None and self._host is not None:
            self._host.ensure_loaded()
        return current or RUNTIME

    def _add(self, entry: RegistryEntry, override: bool) -> None:
        index = self._lookup_index()
        replaced: list[RegistryEntry] = []
        for key in (entry.name, *entry.aliases):
            for other in index.get(key, ()):
                if other.provider != entry.provider and (entry.provider is not RUNTIME or override):
                    continue  # different providers: settled by the conflict rules, never silently
                if not override:
                    raise ValueError(
                        f"{_KIND_LABEL[self.kind]} {key!r} is already registered by {other.provider} "
                        f"({other.target_path}). Hint: pass override=True to replace it, or pick another name."
                    )
                if other not in replaced:
                    replaced.append(other)
        if replaced:
            self._entries = [e for e in self._entries if e not in replaced]
            self._index = None
        self._entries.append(entry)
        if self._index is not None:  # extend the index in place: registration stays linear in plugins
            for key in dict.fromkeys((entry.name, *entry.aliases)):
                self._index.setdefault(key, []).append(entry)

    def remove(self, name: str) -> None:
        """Remove every entry registered under ``name`` (not its aliases' other owners)."""
        key = name.lower()
        self._entries = [e for e in self._entries if e.name != key]
        self._index = None

    def _discard_provider(self, provider: Provider) -> list[RegistryEntry]:
        """Drop everything ``provider`` registered (used when its plugin turns out broken)."""
        dropped = [e for e in self._entries if e.provider == provider]
        self._entries = [e for e in self._entries if e.provider != provider]
        self._index = None
        return dropped

    def _add_broken(self, entries: list[RegistryEntry], error: BaseException) -> None:
        """Keep a broken plugin's names so that asking for them raises its error."""
        for entry in entries:
            entry.error = error
            self._entries.append(entry)
        self._index = None

    # -- lookup -------------------------------------------------------------------------------

    def _lookup_index(self) -> dict[str, list[RegistryEntry]]:
        if self._index is None:
            index: dict[str, list[RegistryEntry]] = {}
            for entry in self._entries:
                for key in dict.fromkeys((entry.name, *entry.aliases)):
                    index.setdefault(key, []).append(entry)
            self._index = index
        return self._index

    def _loaded(self) -> dict[str, list[RegistryEntry]]:
        if self._host is not None:
            self._host.ensure_loaded()
        return self._lookup_index()

    def names(self) -> list[str]:
        """Every registered name (not aliases), sorted."""
        return sorted({e.name for e in self.entries()})

    def entries(self) -> list[RegistryEntry]:
        """Every entry, including shadowed, conflicting and broken ones, in registration order."""
        self._loaded()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _split(name)[0] in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def resolution(self, key: str) -> Resolution:
        """How ``key`` (a name or alias, without ``@provider``) resolves under the conflict rules."""
        candidates = tuple(self._loaded().get(key.lower(), ()))
        if len(candidates) <= 1:
            return Resolution(candidates[0] if candidates else None, candidates, "only provider")
        overrides = [c for c in candidates if c.override]
        if overrides:
            return Resolution(overrides[-1], candidates, "registered at run time with override=True")
        preferred = self._host.preferred_provider(key.lower()) if self._host else None
        if preferred is not None:
            chosen = [c for c in candidates if c.provider.matches(preferred)]
            if chosen:
                return Resolution(chosen[0], candidates, f"TORCHPLUG_PREFER={key.lower()}={preferred}")
        builtins = [c for c in candidates if c.provider.builtin]
        if len(builtins) == 1:
            return Resolution(builtins[0], candidates, "the core's built-in keeps its name")
        return Resolution(None, candidates, "ambiguous")

    def resolve(self, name: str) -> RegistryEntry:
        """The entry ``name`` selects (``name``, an alias, or ``name@provider``).

        Raises:
            UnknownPluginError: No entry has that name.
            PluginConflictError: Several distributions provide it and none was chosen.
            BrokenPluginError: The plugin that provides it failed to load.
        """
        if not isinstance(name, str):
            raise TypeError(f"{_KIND_LABEL[self.kind]} names are strings, got {name!r}")
        key, provider = _split(name)
        if provider is not None:
            return self._resolve_qualified(name, key, provider)
        resolution = self.resolution(key)
        if not resolution.candidates:
            raise self._unknown(name)
        if resolution.winner is None:
            raise self._conflict(key, resolution.candidates)
        if resolution.winner.error is not None:
            raise resolution.winner._broken(resolution.winner.error) from resolution.winner.error
        return resolution.winner

    def _resolve_qualified(self, name: str, key: str, provider: str) -> RegistryEntry:
        candidates = self._loaded().get(key, [])
        for entry in candidates:
            if entry.provider.matches(provider):
                if entry.error is not None:
                    raise entry._broken(entry.error) from entry.error
                return entry
        if not candidates:
            raise self._unknown(key)
        providers = ", ".join(f"{key}@{c.provider.distribution or c.provider.plugin}" for c in candidates)
        raise UnknownPluginError(
            f"No provider {provider!r} for {_KIND_LABEL[self.kind].lower()} {key!r}. Choices: {providers}."
        )

    def get_class(self, name: str) -> type:
        """Import and return the class that ``name`` selects (see :meth:`resolve` for errors)."""
        return self.resolve(name).load()

    def get(self, name: str, check_available: bool = True, **overrides: Any) -> Any:
        """Create a new instance of the class that ``name`` selects.

        Args:
            name: A name, an alias, or ``name@provider``.
            check_available: When the class has ``is_available()``, refuse to create it on a
                machine where that returns False.
            **overrides: Init params that replace the registered ones.

        Raises:
            UnknownPluginError, PluginConflictError, BrokenPluginError: see :meth:`resolve`.
            PluginUnavailableError: The class reports that it cannot run here; the message says why.
        """
        entry = self.resolve(name)
        cls = entry.load()
        if check_available:
            reason = unavailable_reason(cls, entry)
            if reason is not None:
                raise PluginUnavailableError(
                    f"{_KIND_LABEL[self.kind]} {entry.name!r} from {entry.provider} is installed but cannot run "
                    f"on this machine: {reason}"
                )
        return entry.create(**overrides)

    # -- errors -------------------------------------------------------------------------------

    def _unknown(self, name: str) -> UnknownPluginError:
        import difflib

        label = _KIND_LABEL[self.kind]
        names = sorted({e.name for e in self._entries if e.error is None})
        parts = [f"Unknown {label.lower()} {name!r}."]
        close = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.6)
        if close:
            parts.append(f"Did you mean {' or '.join(repr(c) for c in close)}?")
        parts.append(f"Installed: {', '.join(names) if names else '(none)'}.")
        failed = self._host.failed_plugins() if self._host else []
        for record in failed:
            if record.name.lower() == name.lower() or record.state == "broken":
                parts.append(
                    f"Not loaded: plugin {record.name!r} from {record.provider_label} is {record.state}"
                    f" ({record.reason})."
                )
        hint = INSTALL_HINTS[self.kind].get(name.lower())
        if hint is not None:
            parts.append(f"Hint: pip install {hint}")
        error = UnknownPluginError(" ".join(parts))
        for record in failed:
            if record.name.lower() == name.lower() and record.error is not None:
                error.__cause__ = record.error
        return error

    def _conflict(self, key: str, candidates: tuple[RegistryEntry, ...]) -> PluginConflictError:
        label = _KIND_LABEL[self.kind].lower()
        providers = [c.provider for c in candidates]
        dists = [p.distribution or p.plugin for p in providers]
        listed = ", ".join(str(p) for p in providers)
        return PluginConflictError(
            f"The {label} name {key!r} is provided by {len(candidates)} distributions: {listed}. "
            f"Pick one: use '{key}@{dists[0]}', or set TORCHPLUG_PREFER={key}={dists[0]}, "
            f"or block the other with TORCHPLUG_BLOCK_PLUGINS={dists[-1]}."
        )


def unavailable_reason(cls: type, entry: RegistryEntry | None = None) -> str | None:
    """Why ``cls`` cannot run here, asking the class itself; None when it can (or cannot tell)."""
    is_available = getattr(cls, "is_available", None)
    if not callable(is_available) or is_available():
        return None
    explain = getattr(cls, "unavailable_reason", None)
    reason = explain() if callable(explain) else None
    if reason is None and entry is not None:
        reason = entry.unavailable_reason()
    return reason or f"{cls.__name__}.is_available() returned False"


def _split(name: str) -> tuple[str, str | None]:
    key, sep, provider = name.partition("@")
    return key.strip().lower(), (provider.strip() if sep else None)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"Registry {what}s are strings, got {name!r}")
    if not _NAME_RE.match(name):
        raise ValueError(
            f"Invalid registry {what} {name!r}: use letters, digits and '_', '-', '.', '+' (for example 'my_xpu')."
        )
    return name.lower()


def _check_target(target: object) -> str | type:
    if isinstance(target, type):
        return target
    if isinstance(target, str) and _TARGET_RE.match(target):
        return target
    raise TypeError(f"Registry targets are 'module:Class' paths or classes, got {target!r}")


def timed_load(entry: RegistryEntry) -> tuple[type | None, float, BaseException | None]:
    """Load ``entry``'s class, returning it, the seconds it took, and the error if it failed."""
    start = time.perf_counter()
    try:
        cls = entry.load()
    except BrokenPluginError as exc:
        return None, time.perf_counter() - start, exc
    return cls, time.perf_counter() - start, None
