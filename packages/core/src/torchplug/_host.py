"""Loading plugins: our own loader around pluggy's PluginManager.

pluggy's ``load_setuptools_entrypoints`` stops at the first plugin that fails to import and lets
install order decide name conflicts. This loader instead loads each plugin inside its own guard,
records a state for every plugin, and leaves conflicts to the registry's documented rules.

The core's built-ins load inline. Third-party plugins load in a worker thread, each within the
plugin deadline (``TORCHPLUG_PLUGIN_TIMEOUT``, see :mod:`torchplug._deadline`): a plugin that
blocks at import or in a hook is recorded as broken ("did not finish importing within 30 s") and
the others carry on. What a plugin registers is committed only while its deadline holds, so a
plugin that finishes late never registers anything.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Literal, cast, overload

import pluggy
from typing_extensions import override

from torchplug import hookspecs
from torchplug._deadline import Outcome, Ticket, describe_timeout, run_each
from torchplug._discovery import (
    CORE_DISTRIBUTION,
    ENTRY_POINT_GROUP,
    PluginRecord,
    Provider,
    canonicalize_name,
    core_version,
    scan,
)
from torchplug._errors import PluginError, PluginLoadError, PluginTimeoutError
from torchplug._registry import KINDS, RUNTIME, Registry
from torchplug._settings import BLOCK, PLUGINS, TIMEOUT, PluginSettings

if TYPE_CHECKING:
    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.loggers.logger import Logger
    from torchplug.precision.precision import Precision
    from torchplug.strategies.strategy import Strategy

__all__ = ["PluginHost", "plugin_host"]

#: The core's own plugin module, loaded first, always, through the same hooks as every plugin.
BUILTIN_MODULE: Final = "torchplug._builtin"

# Lightning's class-method registration style, mapped onto our hooks for plugin classes.
_CLASSMETHOD_HOOKS: Final = {
    "register_accelerators": "torchplug_register_accelerators",
    "register_strategies": "torchplug_register_strategies",
    "register_precisions": "torchplug_register_precisions",
    "register_checkpoint_io": "torchplug_register_checkpoint_io",
    "register_cluster_environments": "torchplug_register_cluster_environments",
    "register_loggers": "torchplug_register_loggers",
}


class _PluginManager(pluggy.PluginManager):
    """Accepts undecorated ``torchplug_*`` functions as hook implementations.

    Taking every ``torchplug_``-prefixed function as a hook implementation (as pytest does with
    ``pytest_``) is what lets a misspelt hook name be reported instead of silently ignored.
    Lightning-style ``register_*`` classmethods reach the hooks through :func:`_class_plugin`.
    """

    @override
    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        if isinstance(plugin, types.ModuleType):
            # Fast path for the usual case, a module: most names are imports, skipped without inspect.
            attr = plugin.__dict__.get(name)
            if not inspect.isfunction(attr):
                return None
            marked = getattr(attr, f"{self.project_name}_impl", None)
            if marked is not None:
                return cast(pluggy.HookimplOpts, dict(marked))
            return cast(pluggy.HookimplOpts, {}) if name.startswith("torchplug_") else None
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None:
            return opts
        attr = inspect.getattr_static(plugin, name, None)
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if not inspect.isfunction(attr):
            return None
        return cast(pluggy.HookimplOpts, {}) if name.startswith("torchplug_") else None


def _class_plugin(cls: type) -> types.ModuleType:
    """The plugin object for a class named directly by an entry point (Lightning's style).

    Its hooks call the class's ``register_accelerators(cls, accelerator_registry)``-style
    classmethods positionally, so that any parameter name works (Lightning names it
    ``accelerator_registry``, ``strategy_registry``...; pluggy would match hooks by name). The
    class's own ``torchplug_*`` functions are hooks too.
    """
    plugin = types.ModuleType(f"{cls.__module__}:{cls.__qualname__}", cls.__doc__)
    for attr in dir(cls):
        if attr.startswith("torchplug_") and callable(getattr(cls, attr, None)):
            plugin.__dict__[attr] = _forward(getattr(cls, attr))
    for method, hook_name in _CLASSMETHOD_HOOKS.items():
        if callable(getattr(cls, method, None)) and hook_name not in plugin.__dict__:
            plugin.__dict__[hook_name] = _forward_registry(getattr(cls, method))
    plugin.__dict__["target"] = cls
    return plugin


def _forward(function: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function calling ``function`` (a bound classmethod or a staticmethod), with its signature."""

    @functools.wraps(function)  # pluggy reads the argument names and the hookimpl marker through it
    def hook(*args: Any) -> Any:
        return function(*args)

    return hook


def _forward_registry(method: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def hook(registry: Any) -> Any:
        return method(registry)

    return hook


class PluginHost:
    """The plugins of this process: discovery, the six registries, and every plugin's state.

    Discovery runs once, the first time a registry is used (never at ``import torchplug``).
    Use :func:`plugin_host` for the process-wide instance.
    """

    def __init__(self, settings: PluginSettings | None = None) -> None:
        self._settings = settings
        self.registries: Final[dict[str, Registry[Any]]] = {kind: Registry(kind, self) for kind in KINDS}
        self._records: list[PluginRecord] = []
        self.load_seconds = 0.0
        self._pm = self._new_manager()
        self._state = "new"
        self._lock = threading.RLock()
        # The plugin a thread is loading, and its ticket: registrations are stamped with the one
        # and committed under the other (see _deadline), whichever thread the plugin runs in.
        self._local = threading.local()
        self._strict_error: PluginLoadError | None = None
        self._active_settings: PluginSettings | None = None
        self._class_plugins: dict[type, types.ModuleType] = {}

    @staticmethod
    def _new_manager() -> _PluginManager:
        pm = _PluginManager(hookspecs.PROJECT_NAME)
        pm.add_hookspecs(hookspecs)
        return pm

    # -- RegistryHost protocol ----------------------------------------------------------------

    def ensure_loaded(self) -> None:
        """Run discovery if it has not run yet (thread-safe; calls made by a loading plugin return at once).

        The discovery settings are read and checked first, so a bad ``TORCHPLUG_*`` value raises
        :class:`~torchplug.PluginSettingsError` with every registry untouched; a discovery that
        fails leaves nothing half-built, and the next call tries again.

        Raises:
            PluginSettingsError: A discovery variable holds a bad value.
            PluginLoadError: ``TORCHPLUG_STRICT_PLUGINS=1`` and a plugin failed to load.
        """
        if self._state != "loaded" and getattr(self._local, "ticket", None) is None:
            with self._lock:  # an RLock: the loading thread itself passes straight through
                if self._state == "new":
                    settings = self.settings
                    self._state = "loading"
                    try:
                        self._load(settings)
                    except BaseException:
                        self._reset(self._settings)
                        raise
                    self._state = "loaded"
        if self._strict_error is not None and self._state == "loaded":
            raise self._strict_error

    def current_provider(self) -> Provider | None:
        """The plugin this thread is loading right now (registrations are stamped with it), else None."""
        provider: Provider | None = getattr(self._local, "provider", None)
        return provider

    @contextmanager
    def registering(self) -> Iterator[Provider]:
        """Hold while one registration is applied: yields its provider, and refuses a late one.

        A plugin loading in a worker thread commits its registrations only while its deadline
        holds; one that finishes late gets :class:`~torchplug._deadline.Abandoned` instead.
        """
        ticket: Ticket | None = getattr(self._local, "ticket", None)
        if ticket is None:
            yield self.current_provider() or self._runtime_provider()
            return
        with ticket.committing():
            yield self._local.provider

    def _runtime_provider(self) -> Provider:
        self.ensure_loaded()
        return RUNTIME

    def failed_plugins(self) -> list[PluginRecord]:
        """Plugins that were found but did not load, in listing order."""
        return [r for r in self.records if r.state not in ("ok", "pending")]

    def preferred_provider(self, name: str) -> str | None:
        """The provider ``TORCHPLUG_PREFER`` picks for ``name``."""
        return self.settings.prefer.get(name)

    # -- public API ---------------------------------------------------------------------------

    @property
    def settings(self) -> PluginSettings:
        """The settings in force (read from the environment at discovery time unless given)."""
        if self._active_settings is None:
            self._active_settings = self._settings or PluginSettings.from_env()
        return self._active_settings

    @property
    def records(self) -> list[PluginRecord]:
        """Every plugin found, in load order (the core's built-ins first), each with its state."""
        self.ensure_loaded()
        return self._records

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy PluginManager (for tracing and advanced use)."""
        self.ensure_loaded()
        return self._pm

    @overload
    def registry(self, kind: Literal["accelerator"]) -> Registry[Accelerator]: ...
    @overload
    def registry(self, kind: Literal["strategy"]) -> Registry[Strategy]: ...
    @overload
    def registry(self, kind: Literal["precision"]) -> Registry[Precision]: ...
    @overload
    def registry(self, kind: Literal["checkpoint_io"]) -> Registry[CheckpointIO]: ...
    @overload
    def registry(self, kind: Literal["cluster_environment"]) -> Registry[ClusterEnvironment]: ...
    @overload
    def registry(self, kind: Literal["logger"]) -> Registry[Logger]: ...
    @overload
    def registry(self, kind: str) -> Registry[Any]: ...
    def registry(self, kind: str) -> Registry[Any]:
        """The registry of one kind: accelerator, strategy, precision, checkpoint_io, cluster_environment or logger.

        Type checkers see the kind's base class: ``registry("accelerator")`` is a
        ``Registry[Accelerator]``, whose ``get()`` returns an ``Accelerator``.

        Raises:
            ValueError: ``kind`` is not one of the six kinds.
        """
        try:
            return self.registries[kind]
        except KeyError:
            raise ValueError(f"Unknown plugin kind {kind!r}. Choices: {', '.join(KINDS)}") from None

    def refresh(self, settings: PluginSettings | None = None) -> None:
        """Forget everything and scan again on next use (after ``pip install`` in a notebook, or in tests).

        Registries keep their identity, so references held elsewhere stay valid; names
        registered at run time by user code are dropped too.
        """
        with self._lock:
            self._reset(settings)

    def _reset(self, settings: PluginSettings | None) -> None:
        self._pm = self._new_manager()
        for registry in self.registries.values():
            registry.clear()
        self._records = []
        self._settings = settings
        self._active_settings = None
        self._strict_error = None
        self._state = "new"

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any, BaseException | None]]:
        """Call one hook on every loaded plugin, each in its own guard and within the plugin deadline.

        Returns (plugin record, result, error) for each implementation; an implementation that
        raised (or did not finish in time: :class:`~torchplug.PluginTimeoutError`) gives its
        exception instead of stopping the others.
        """
        self.ensure_loaded()
        by_key = {r.key: r for r in self.records}
        impls = getattr(self._pm.hook, hook_name).get_hookimpls()
        calls = [(_hook_call(impl, kwargs), impl.plugin_name) for impl in impls]
        timeout = self.settings.timeout
        results: list[tuple[PluginRecord, Any, BaseException | None]] = []
        for impl, outcome in zip(impls, run_each(calls, timeout)):
            record = by_key[impl.plugin_name]
            error = outcome.error
            if outcome.timed_out:
                error = PluginTimeoutError(
                    f"plugin {record.name!r} from {record.provider_label}: its {hook_name} hook "
                    f"{describe_timeout(outcome, timeout)} ({TIMEOUT}={timeout:g})"
                )
            results.append((record, outcome.value, error))
        return results

    # -- loading ------------------------------------------------------------------------------

    def _load(self, settings: PluginSettings) -> None:
        start = time.perf_counter()
        version = core_version()
        builtin = PluginRecord(
            name="builtin", value=BUILTIN_MODULE, distribution=CORE_DISTRIBUTION, version=version, builtin=True
        )
        self._records = [builtin]
        self._run_inline(builtin, lambda: importlib.import_module(BUILTIN_MODULE))
        found = scan(version)
        self._records.extend(found)
        matched_requests, matched_blocks = self._apply_settings(found, settings)
        unmatched = [name for name in settings.requested if name not in matched_requests]
        self._records.extend(_unmatched_record(name, found) for name in unmatched)
        _warn_unmatched(unmatched, [n for n in settings.blocked if n not in matched_blocks], found, settings)
        pending = [r for r in self._records if r.state == "pending"]
        calls = [(self._plugin_call(record), record.key) for record in pending]
        for record, outcome in zip(pending, run_each(calls, settings.timeout)):
            if outcome.timed_out:
                self._time_out(record, outcome, settings.timeout)
        self.load_seconds = time.perf_counter() - start
        if settings.strict:
            self._check_strict()

    def _apply_settings(self, records: list[PluginRecord], settings: PluginSettings) -> tuple[set[str], set[str]]:
        """Mark blocked and disabled plugins; return the requested and the blocked names some plugin answered to."""
        # Names match in any spelling of a distribution or entry point, and module paths as written.
        blocked = {_canon(n): n for n in settings.blocked} | {n: n for n in settings.blocked}
        requested = {_canon(n): n for n in settings.requested} | {n: n for n in settings.requested}
        matched: set[str] = set()
        matched_blocks: set[str] = set()
        for record in records:
            # An entry point answers to its own name, its distribution's, and its module's.
            names = {_canon(record.name), _canon(record.distribution or ""), record.value.partition(":")[0]}
            matched.update(requested[n] for n in names & requested.keys())
            matched_blocks.update(blocked[n] for n in names & blocked.keys())
            if record.state not in ("pending", "incompatible"):
                continue  # shadowed copies stay shadowed
            if names & blocked.keys():
                record.state, record.reason = "blocked", "named in TORCHPLUG_BLOCK_PLUGINS"
            elif not settings.autoload and not names & requested.keys():
                record.state = "disabled"
                record.reason = "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD=1 and not named in TORCHPLUG_PLUGINS"
        return matched, matched_blocks

    def _run_inline(self, record: PluginRecord, obtain: Callable[[], object]) -> None:
        """Load one plugin in this thread, without a deadline (the core's built-ins)."""
        try:
            self._load_plugin(record, obtain, Ticket())
        except Exception as exc:  # the built-ins failing is a bug of the core: recorded, never hidden
            self._mark_broken(record, None, exc)

    def _plugin_call(self, record: PluginRecord) -> Callable[[Ticket], None]:
        def call(ticket: Ticket) -> None:
            self._load_plugin(record, self._loader_for(record), ticket)

        return call

    def _loader_for(self, record: PluginRecord) -> Callable[[], object]:
        entry_point = record.entry_point
        assert entry_point is not None, "only installed entry points are loaded"

        def obtain() -> object:
            loaded = entry_point.load()
            return self._class_plugin(loaded) if isinstance(loaded, type) else loaded

        return obtain

    def _class_plugin(self, cls: type) -> types.ModuleType:
        if cls not in self._class_plugins:  # one plugin object per class: a second entry point is a duplicate
            self._class_plugins[cls] = _class_plugin(cls)
        return self._class_plugins[cls]

    def _load_plugin(self, record: PluginRecord, obtain: Callable[[], object], ticket: Ticket) -> None:
        """Import one plugin and run its registration hooks; commit each step only while ``ticket`` holds.

        Runs in the worker thread for third-party plugins (see :mod:`torchplug._deadline`).
        """
        start = time.perf_counter()
        had_torch = "torch" in sys.modules
        self._local.provider, self._local.ticket = record.provider, ticket
        plugin: object = None
        try:
            ticket.phase = "importing"
            plugin = obtain()
            with ticket.committing():
                if self._pm.is_registered(plugin):  # the same module under a second name: load it once
                    record.state = "shadowed"
                    record.reason = f"already loaded as {self._pm.get_name(plugin)}"
                    return
                self._pm.register(plugin, name=record.key)
            self._check_hook_names(plugin)
            for kind, hook_name in hookspecs.REGISTRATION_HOOKS.items():
                ticket.phase = f"running its {hook_name} hook"
                self._call_registration(plugin, hook_name, self.registries[kind])
        except (Exception, SystemExit) as exc:
            if not ticket.abandoned:
                with ticket.committing():
                    self._mark_broken(record, plugin, exc)
        else:
            with ticket.committing():
                record.state = "ok"
        finally:
            self._local.provider = self._local.ticket = None
            if not ticket.abandoned:
                with ticket.committing():
                    record.load_seconds = time.perf_counter() - start
                    record.imports_torch = not had_torch and "torch" in sys.modules

    def _time_out(self, record: PluginRecord, outcome: Outcome[None], timeout: float) -> None:
        """Record a plugin left behind at its deadline as broken, with whatever it registered in time."""
        message = (
            f"plugin {record.name!r} from {record.provider_label} {describe_timeout(outcome, timeout)} "
            f"({TIMEOUT}={timeout:g}); it was left behind and its names are not usable. "
            f"Hint: fix or uninstall it, block it with TORCHPLUG_BLOCK_PLUGINS={record.distribution or record.name}, "
            f"or raise {TIMEOUT} if it is only slow."
        )
        plugin = self._pm.get_plugin(record.key)
        self._mark_broken(record, plugin, PluginTimeoutError(message), with_traceback=False)
        record.load_seconds = outcome.seconds

    def _call_registration(self, plugin: object, hook_name: str, registry: Registry[Any]) -> None:
        for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                impl.function(*[registry for _ in impl.argnames])

    def _check_hook_names(self, plugin: object) -> None:
        for caller in self._pm.get_hookcallers(plugin) or []:
            if caller.has_spec():
                continue
            if all(impl.optionalhook for impl in caller.get_hookimpls() if impl.plugin is plugin):
                continue
            import difflib

            close = difflib.get_close_matches(caller.name, hookspecs.HOOK_NAMES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise PluginError(
                f"unknown hook {caller.name!r}.{hint} Known hooks: {', '.join(sorted(hookspecs.HOOK_NAMES))}"
            )

    def _mark_broken(
        self, record: PluginRecord, plugin: object, exc: BaseException, with_traceback: bool = True
    ) -> None:
        record.state = "broken"
        record.error = exc
        record.reason = f"{type(exc).__name__}: {exc}"
        if with_traceback:
            import traceback

            record.traceback = "".join(traceback.format_exception(exc))
        if plugin is not None and self._pm.get_plugin(record.key) is plugin:
            self._pm.unregister(plugin)
        for registry in self.registries.values():
            registry._mark_broken(record.provider, exc)

    def _check_strict(self) -> None:
        failed = [r for r in self.records if r.state in ("broken", "incompatible")]
        if failed:
            lines = "\n".join(f"  {r.name} ({r.provider_label}): {r.state}: {r.reason}" for r in failed)
            error = PluginLoadError(
                f"{len(failed)} plugin(s) failed to load and TORCHPLUG_STRICT_PLUGINS=1:\n{lines}\n"
                "Hint: fix or uninstall them, block them with TORCHPLUG_BLOCK_PLUGINS, "
                "or unset TORCHPLUG_STRICT_PLUGINS."
            )
            error.__cause__ = failed[0].error
            self._strict_error = error


def _canon(name: str) -> str:
    return canonicalize_name(name) if name else ""


def _hook_call(impl: pluggy.HookImpl, kwargs: dict[str, Any]) -> Callable[[Ticket], Any]:
    def call(ticket: Ticket) -> Any:
        ticket.phase = "running"
        return impl.function(*[kwargs[a] for a in impl.argnames])

    return call


def _warn_unmatched(
    requested: list[str], blocked: list[str], found: list[PluginRecord], settings: PluginSettings
) -> None:
    """Say which names of ``TORCHPLUG_PLUGINS`` and ``TORCHPLUG_BLOCK_PLUGINS`` no installed plugin answers to.

    A warning, not an error: a blocked name may be a plugin of another machine, and a requested one
    is recorded as a broken plugin (``core plugins list`` shows it; ``TORCHPLUG_STRICT_PLUGINS=1`` raises).
    """
    from torchplug.utilities.warn import warn_once

    installed = ", ".join(sorted({r.name for r in found} | {r.distribution for r in found if r.distribution}))
    for variable, given, names in (
        (PLUGINS, settings.requested, [] if settings.strict else requested),
        (BLOCK, settings.blocked, blocked),
    ):
        if names:
            warn_once(
                f"{variable}={','.join(given)!r} names {', '.join(map(repr, names))}, which no installed plugin "
                f"answers to (entry-point, distribution or module name); it is ignored. Installed plugins: "
                f"{installed or '(none)'}. Hint: correct the name, or remove it if that plugin is not meant for "
                "this machine."
            )


def _unmatched_record(name: str, found: list[PluginRecord]) -> PluginRecord:
    """A broken record for a ``TORCHPLUG_PLUGINS`` name that no installed plugin answers to.

    Nothing is imported by name: ``TORCHPLUG_PLUGINS`` selects among installed entry points, so a
    module lying in the current directory (or anywhere on ``sys.path``) is never loaded as a plugin.
    """
    import importlib.metadata

    installed = sorted({r.distribution for r in found if r.distribution})
    try:
        dist = importlib.metadata.distribution(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        found_dist = ""
    else:
        found_dist = (
            f" The distribution {dist.metadata['Name']} is installed but declares no {ENTRY_POINT_GROUP!r} entry point."
        )
    error = PluginError(
        f"TORCHPLUG_PLUGINS names {name!r}, but no installed plugin has that entry-point, distribution or "
        f"module name.{found_dist} Installed plugin distributions: {', '.join(installed) or '(none)'}. "
        "Hint: TORCHPLUG_PLUGINS selects installed plugins only; pip install the plugin's package."
    )
    return PluginRecord(name=name, value=name, state="broken", reason=f"PluginError: {error}", error=error)


_HOST: PluginHost | None = None
_HOST_LOCK = threading.Lock()


def plugin_host() -> PluginHost:
    """The process-wide :class:`PluginHost` (created on first call; discovery runs on first use)."""
    global _HOST
    if _HOST is None:
        with _HOST_LOCK:
            if _HOST is None:
                _HOST = PluginHost()
    return _HOST
