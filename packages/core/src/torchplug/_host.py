"""Loading plugins: our own loader around pluggy's PluginManager.

pluggy's ``load_setuptools_entrypoints`` stops at the first plugin that fails to import and lets
install order decide name conflicts. This loader instead loads each plugin inside its own guard,
records a state for every plugin, and leaves conflicts to the registry's documented rules.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, cast, overload

import pluggy
from typing_extensions import override

from torchplug import hookspecs
from torchplug._discovery import CORE_DISTRIBUTION, PluginRecord, Provider, canonicalize_name, core_version, scan
from torchplug._errors import PluginError, PluginLoadError
from torchplug._registry import KINDS, Registry
from torchplug._settings import PluginSettings

if TYPE_CHECKING:
    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
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
}


class _PluginManager(pluggy.PluginManager):
    """Accepts undecorated ``torchplug_*`` functions and Lightning-style ``register_*`` classmethods.

    Taking every ``torchplug_``-prefixed function as a hook implementation (as pytest does with
    ``pytest_``) is what lets a misspelt hook name be reported instead of silently ignored.
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
        if name.startswith("torchplug_"):
            return cast(pluggy.HookimplOpts, {})
        if isinstance(plugin, type) and name in _CLASSMETHOD_HOOKS:
            return cast(pluggy.HookimplOpts, {"specname": _CLASSMETHOD_HOOKS[name]})
        return None


class PluginHost:
    """The plugins of this process: discovery, the five registries, and every plugin's state.

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
        self._current: Provider | None = None
        self._strict_error: PluginLoadError | None = None
        self._active_settings: PluginSettings | None = None

    @staticmethod
    def _new_manager() -> _PluginManager:
        pm = _PluginManager(hookspecs.PROJECT_NAME)
        pm.add_hookspecs(hookspecs)
        return pm

    # -- RegistryHost protocol ----------------------------------------------------------------

    def ensure_loaded(self) -> None:
        """Run discovery if it has not run yet (thread-safe; re-entrant calls return at once)."""
        if self._state != "loaded":
            with self._lock:  # an RLock: the loading thread itself passes straight through
                if self._state == "new":
                    self._state = "loading"
                    try:
                        self._load()
                    finally:
                        self._state = "loaded"
        if self._strict_error is not None and self._state == "loaded":
            raise self._strict_error

    def current_provider(self) -> Provider | None:
        """The plugin being loaded right now (registrations are stamped with it), else None."""
        return self._current

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
    def registry(self, kind: str) -> Registry[Any]: ...
    def registry(self, kind: str) -> Registry[Any]:
        """The registry of one kind: accelerator, strategy, precision, checkpoint_io or cluster_environment.

        Type checkers see the kind's base class: ``registry("accelerator")`` is a
        ``Registry[Accelerator]``, whose ``get()`` returns an ``Accelerator``.

        Raises:
            ValueError: ``kind`` is not one of the five kinds.
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
            self._pm = self._new_manager()
            for registry in self.registries.values():
                registry.clear()
            self._records = []
            self._settings = settings
            self._active_settings = None
            self._strict_error = None
            self._state = "new"

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any, BaseException | None]]:
        """Call one hook on every loaded plugin, each in its own guard.

        Returns (plugin record, result, error) for each implementation; an implementation that
        raised gives its exception instead of stopping the others.
        """
        self.ensure_loaded()
        by_key = {r.key: r for r in self.records}
        results: list[tuple[PluginRecord, Any, BaseException | None]] = []
        for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
            record = by_key[impl.plugin_name]
            try:
                results.append((record, impl.function(*[kwargs[a] for a in impl.argnames]), None))
            except Exception as exc:
                results.append((record, None, exc))
        return results

    # -- loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        start = time.perf_counter()
        settings = self.settings
        version = core_version()
        builtin = PluginRecord(
            name="builtin", value=BUILTIN_MODULE, distribution=CORE_DISTRIBUTION, version=version, builtin=True
        )
        self._records = [builtin]
        self._load_plugin(builtin, lambda: importlib.import_module(BUILTIN_MODULE))
        found = scan(version)
        self._records.extend(found)
        matched_requests = self._apply_settings(found, settings)
        for name in settings.requested:
            if name not in matched_requests:
                self._records.append(_module_record(name))
        for record in self._records:
            if record.state == "pending":
                self._load_plugin(record, self._loader_for(record))
        self.load_seconds = time.perf_counter() - start
        if settings.strict:
            self._check_strict()

    def _apply_settings(self, records: list[PluginRecord], settings: PluginSettings) -> set[str]:
        # Names match in any spelling of a distribution or entry point, and module paths as written.
        blocked = {_canon(n) for n in settings.blocked} | set(settings.blocked)
        requested = {_canon(n): n for n in settings.requested} | {n: n for n in settings.requested}
        matched: set[str] = set()
        for record in records:
            # An entry point answers to its own name, its distribution's, and its module's.
            names = {_canon(record.name), _canon(record.distribution or ""), record.value.partition(":")[0]}
            matched.update(requested[n] for n in names & requested.keys())
            if record.state not in ("pending", "incompatible"):
                continue  # shadowed copies stay shadowed
            if names & blocked:
                record.state, record.reason = "blocked", "named in TORCHPLUG_BLOCK_PLUGINS"
            elif not settings.autoload and not names & requested.keys():
                record.state = "disabled"
                record.reason = "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD=1 and not named in TORCHPLUG_PLUGINS"
        return matched

    @staticmethod
    def _loader_for(record: PluginRecord) -> Callable[[], object]:
        if record.entry_point is not None:
            return record.entry_point.load
        return lambda: _import_named_module(record.value)

    def _load_plugin(self, record: PluginRecord, obtain: Callable[[], object]) -> None:
        start = time.perf_counter()
        self._current = record.provider
        plugin: object = None
        try:
            plugin = obtain()
            if self._pm.is_registered(plugin):  # the same module under a second name: load it once
                record.state = "shadowed"
                record.reason = f"already loaded as {self._pm.get_name(plugin)}"
                return
            self._pm.register(plugin, name=record.key)
            self._check_hook_names(plugin)
            for kind, hook_name in hookspecs.REGISTRATION_HOOKS.items():
                self._call_registration(plugin, hook_name, self.registries[kind])
        except (Exception, SystemExit) as exc:
            self._mark_broken(record, plugin, exc)
        else:
            record.state = "ok"
        finally:
            self._current = None
            record.load_seconds = time.perf_counter() - start

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

    def _mark_broken(self, record: PluginRecord, plugin: object, exc: BaseException) -> None:
        record.state = "broken"
        record.error = exc
        record.reason = f"{type(exc).__name__}: {exc}"
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


def _module_record(name: str) -> PluginRecord:
    """A record for a plugin module named in TORCHPLUG_PLUGINS, with the distribution that ships it, if any."""
    import importlib.metadata

    top = name.partition(".")[0]
    distributions = importlib.metadata.packages_distributions().get(top, [])
    if len(distributions) == 1:
        try:
            version = importlib.metadata.version(distributions[0])
        except importlib.metadata.PackageNotFoundError:
            version = None
        return PluginRecord(name=name, value=name, distribution=distributions[0], version=version)
    return PluginRecord(name=name, value=name)


def _import_named_module(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise PluginError(
                f"TORCHPLUG_PLUGINS names {name!r}, but no plugin entry point, distribution or module has that name"
            ) from exc
        raise


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
