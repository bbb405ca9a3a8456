"""The plugin boundary: where torchplug calls plugin code, and what comes back from it.

The registry (:mod:`torchplug._registry`) only looks names up. Everything that runs a plugin's
code once its name is found lives here: the cheap probe, ``is_available()`` and
``unavailable_reason()`` (third-party code within the plugin deadline, in a worker thread: see
:mod:`torchplug._deadline`), and the creation of instances. Whatever plugin code raises comes back
as a torchplug error that names the entry and its provider.

:func:`provide` is the one question the Trainer's assembly asks per kind: a name, a class or an
instance in, an instance and the facts of its choice (:class:`Provided`) out.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, cast

from typing_extensions import TypeVar

from torchplug._deadline import Outcome, Ticket, describe_timeout, run_each
from torchplug._errors import (
    BrokenPluginError,
    MisconfigurationError,
    PluginError,
    PluginTimeoutError,
    PluginUnavailableError,
)

if TYPE_CHECKING:
    from torchplug._discovery import Provider
    from torchplug._registry import Registry, RegistryEntry

__all__ = [
    "Provided",
    "ask_class",
    "at_boundary",
    "check_availabilities",
    "check_availability",
    "create",
    "ensure_available",
    "provide",
    "run_probe",
    "why_unavailable",
]

_T = TypeVar("_T", default=Any)
_R = TypeVar("_R")


# -- one entry ------------------------------------------------------------------------------------


def run_probe(entry: RegistryEntry[Any]) -> str | None:
    """Run ``entry``'s cheap probe, if any: None when available, else the reason. Never imports the target."""
    if entry.probe is None:
        return None
    probe = _import_target(entry.probe) if isinstance(entry.probe, str) else entry.probe
    result = probe()
    return None if result is None else str(result)


def create(entry: RegistryEntry[_T], **overrides: Any) -> _T:
    """A new instance of ``entry``'s class with its registered init params, updated by ``overrides``.

    This does not ask whether the class can run here: call :func:`ensure_available` first.

    Raises:
        BrokenPluginError: The class failed to load (see :meth:`RegistryEntry.load`).
        TypeError: The class refused the init params; the message names the entry and its provider.
    """
    cls = entry.load()
    params = {**entry.init_params, **overrides}
    try:
        return cls(**params)
    except TypeError as exc:
        raise TypeError(
            f"Could not create {entry.kind} {entry.name!r} ({entry.target_path}) from {entry.provider} "
            f"with {params}: {exc}"
        ) from exc


def ensure_available(entry: RegistryEntry[Any]) -> None:
    """Load ``entry``'s class and refuse it when it reports that it cannot run on this machine.

    The class is imported in this thread (it is the one the user asked for). Its ``is_available()``
    decides (a class without one is taken as available); the words come from
    ``unavailable_reason()`` or the probe, asked as in :func:`why_unavailable`.

    Raises:
        BrokenPluginError: The class failed to load, or the availability check raised (or, as
            :class:`~torchplug.PluginTimeoutError`, did not finish within the plugin deadline).
        PluginUnavailableError: The class's ``is_available()`` returned False; the message says why.
    """
    reason = why_unavailable(entry.load(), entry)
    if reason is not None:
        raise PluginUnavailableError(f"{entry.owner} is installed but cannot run on this machine: {reason}")


def why_unavailable(cls: type, entry: RegistryEntry[Any] | None = None) -> str | None:
    """Why ``cls`` cannot run here, asking the class itself; None when it can (or cannot tell).

    The class's ``is_available()`` decides; its ``unavailable_reason()`` (accelerators) gives the
    words, else the entry's probe, else a generic sentence. A class without ``is_available()``
    is taken as available. This is a plugin boundary: a class that is not the core's own is asked
    within the plugin deadline, and whatever it raises comes back as a torchplug error.

    Raises:
        BrokenPluginError: ``is_available()``, ``unavailable_reason()`` or the probe raised; the
            message names the class (and its provider) and quotes the original error, which is chained.
        PluginTimeoutError: One of them did not finish within ``TORCHPLUG_PLUGIN_TIMEOUT`` seconds.
    """
    owner = entry.owner if entry is not None else f"{cls.__module__}.{cls.__qualname__}"
    core = entry.provider.builtin if entry is not None else cls.__module__.partition(".")[0] == "torchplug"
    timeout = 0.0 if core else _plugin_timeout()
    (outcome,) = run_each([(lambda ticket: ask_class(cls, entry, ticket), None)], timeout)
    return _result(outcome, owner, timeout)


def check_availability(entry: RegistryEntry[Any]) -> str | None:
    """Whether ``entry`` can run on this machine: None when it can, else why not, in words.

    The plugin boundary for availability, shared by ``accelerator="auto"``, ``core plugins list``
    and :func:`ensure_available`. In order: the entry's cheap probe (a reason ends the check, and
    nothing is imported), the class's import (:meth:`RegistryEntry.load`), its ``is_available()``,
    and, when that is False, ``unavailable_reason()`` (else the probe) for the words. A class
    without ``is_available()`` is judged by its probe alone.

    The core's own entries are asked in this thread. A third-party entry's code runs in a worker
    thread within the plugin deadline (``TORCHPLUG_PLUGIN_TIMEOUT`` seconds, 30 by default), so a
    plugin that blocks in a probe, an import or ``is_available()`` cannot hang the caller.

    Raises:
        BrokenPluginError: The probe, the import, ``is_available()`` or ``unavailable_reason()``
            raised. The message names the entry and its provider and quotes the original error
            (chained as the cause).
        PluginTimeoutError: One of them did not finish within the deadline (a ``BrokenPluginError``).
    """
    result = check_availabilities([entry])[0]
    if isinstance(result, PluginError):
        raise result
    return result


def check_availabilities(entries: Sequence[RegistryEntry[Any]]) -> list[str | PluginError | None]:
    """:func:`check_availability` for several entries at once, without raising.

    The third-party entries share one worker thread, each within its own deadline (an entry left
    behind skips the later entries of its provider, which would likely wait on it). Returns, for
    each entry in order, None (available), the reason it is not, or the error it would raise.
    """
    return at_boundary(entries, _availability_call)


def at_boundary(
    entries: Sequence[RegistryEntry[Any]], make_call: Callable[[RegistryEntry[Any]], Callable[[Ticket], _R]]
) -> list[_R | PluginError]:
    """Run ``make_call(entry)`` for each entry at the plugin boundary; never raises for an entry.

    The core's entries run in this thread; third-party ones in one worker thread, each within the
    plugin deadline (see :mod:`torchplug._deadline`). Returns, in order, what each call returned, or
    the :class:`~torchplug.BrokenPluginError` (:class:`~torchplug.PluginTimeoutError`) naming the
    entry and its provider, with the original error chained.
    """
    results: list[_R | PluginError | None] = [None] * len(entries)
    for core in (True, False):
        chosen = [i for i, entry in enumerate(entries) if entry.provider.builtin is core]
        if not chosen:
            continue
        timeout = 0.0 if core else _plugin_timeout()
        calls = [(make_call(entries[i]), entries[i].provider) for i in chosen]
        for i, outcome in zip(chosen, run_each(calls, timeout)):
            try:
                results[i] = _result(outcome, entries[i].owner, timeout)
            except PluginError as exc:
                results[i] = exc
    return cast("list[_R | PluginError]", results)  # every slot was filled above


def ask_class(cls: type, entry: RegistryEntry[Any] | None, ticket: Ticket) -> str | None:
    """Ask ``cls`` whether it can run here (``is_available()``, then the words for a no); None when it can.

    Plugin code: call it inside :func:`at_boundary` (or :func:`why_unavailable`), which holds the deadline.
    """
    is_available = getattr(cls, "is_available", None)
    if not callable(is_available):
        return None
    ticket.phase = "running is_available()"
    if is_available():
        return None
    ticket.phase = "running unavailable_reason()"
    explain = getattr(cls, "unavailable_reason", None)
    reason = explain() if callable(explain) else None
    if reason is None and entry is not None:
        ticket.phase = "running its availability probe"
        reason = run_probe(entry)
    return str(reason) if reason else f"{cls.__name__}.is_available() returned False"


def _availability_call(entry: RegistryEntry[Any]) -> Callable[[Ticket], str | None]:
    def call(ticket: Ticket) -> str | None:
        ticket.phase = "running its availability probe"
        reason = run_probe(entry)
        if reason is not None:
            return reason
        ticket.phase = "importing its class"
        cls = entry.load()
        if not callable(getattr(cls, "is_available", None)):
            return None
        return ask_class(cls, entry, ticket)

    return call


def _plugin_timeout() -> float:
    from torchplug._settings import plugin_timeout

    return plugin_timeout()


def _result(outcome: Outcome[_R], owner: str, timeout: float) -> _R:
    """The outcome of plugin code as a value, or as the torchplug error that names its owner."""
    if outcome.timed_out:
        from torchplug._settings import TIMEOUT

        raise PluginTimeoutError(
            f"{owner} {describe_timeout(outcome, timeout)} ({TIMEOUT}={timeout:g}). Hint: fix or uninstall "
            f"the plugin, block it with TORCHPLUG_BLOCK_PLUGINS, or raise {TIMEOUT} if it is only slow."
        )
    error = outcome.error
    if isinstance(error, BrokenPluginError):  # a failed import: it already names the provider
        raise error
    if error is not None:
        what = outcome.phase.removeprefix("running ")
        raise BrokenPluginError(f"{owner}: {what} raised {type(error).__name__}: {error}") from error
    return cast("_R", outcome.value)  # None only when the call returned None


def _import_target(path: str) -> Any:
    module_name, _, attr_path = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    return obj


# -- the one question per kind ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Provided(Generic[_T]):
    """What :func:`provide` hands back: the instance, and the facts the caller records about the choice.

    Attributes:
        instance: The object to use.
        given: How it was given: ``"name"`` (created from a registry entry), ``"class"``
            (instantiated without arguments) or ``"instance"`` (handed back as is).
        name: The registered name of the entry used; for a class or an instance, its class name.
        provider: Who provided the entry used (None for a class or an instance given by the user).
        entry: The registry entry it was created from (None unless ``given == "name"``).
        requested: The registered name asked for, before ``rename`` (None unless ``given == "name"``).
        unavailable: For an instance checked with ``check_instance=True``: why its class cannot run
            here (None when it can). The caller words the error, in the user's own terms.
        missing: The ``default=`` name that is not installed, which ``fallback=`` replaced (else None).
        hint: The install hint of :attr:`missing`, when one is known.
        default: The ``default=`` name (after ``fallback=``), which :meth:`create_default` creates.
        registry: The registry asked (where :meth:`create_default` finds the default).
    """

    instance: _T
    given: Literal["name", "class", "instance"]
    name: str
    provider: Provider | None = None
    entry: RegistryEntry[_T] | None = None
    requested: str | None = None
    unavailable: str | None = None
    missing: str | None = None
    hint: str | None = None
    default: str | None = None
    registry: Registry[_T] | None = field(default=None, repr=False)

    def create_default(self) -> _T:
        """A new instance of the ``default=`` entry, checked for this machine (a wrapper's inner object).

        Raises:
            ValueError: :func:`provide` was asked without ``default=``.
        """
        if self.default is None or self.registry is None:
            raise ValueError("provide(..., default=NAME) was not asked for a default: there is none to create")
        entry = self.entry if self.given == "name" and self.requested == self.default else None
        entry = entry or self.registry.resolve(self.default)  # looked up only now: unused, it cannot fail a run
        ensure_available(entry)
        return create(entry)


def provide(
    registry: Registry[_T],
    value: object,
    *,
    rename: Callable[[str], str] | None = None,
    default: str | None = None,
    fallback: str | None = None,
    check_instance: bool = False,
) -> Provided[_T]:
    """An object of ``registry``'s kind from a name, a class or an instance: the one question per kind.

    A name is looked up once (``name``, an alias or ``name@provider``), renamed by ``rename`` when
    given (an accelerator maps ``"16-mixed"`` to the precision it runs), checked for this machine,
    and created from its entry. A class of the kind is instantiated without arguments; an instance
    is handed back (and, with ``check_instance=True``, its class asked whether it can run here).

    Args:
        registry: The kind's registry.
        value: A registered name, a class or an instance of the kind; None takes ``default``.
        rename: Maps the registered name asked for (or the name given, when it is not registered)
            to the name to create; it may raise to refuse it.
        default: The name used when ``value`` is None; also the entry :meth:`Provided.create_default`
            creates (a wrapping checkpoint IO's inner one).
        fallback: The name that replaces ``default`` when no plugin installed provides it (the
            replaced name and its install hint are in :attr:`Provided.missing` and :attr:`Provided.hint`).
        check_instance: Ask an instance's class whether it can run here (:attr:`Provided.unavailable`).

    Raises:
        UnknownPluginError, PluginConflictError, BrokenPluginError: The name is unknown,
            ambiguous or broken (see :meth:`Registry.resolve`).
        PluginUnavailableError: The class reports that it cannot run here; the message says why.
        MisconfigurationError: ``value`` is none of the above; the message lists the installed names.
    """
    missing = hint = None
    if default is not None and fallback is not None and default not in registry:
        missing, hint, default = default, registry.install_hint(default), fallback
    facts: dict[str, Any] = {"missing": missing, "hint": hint, "default": default, "registry": registry}
    if value is None and default is not None:
        value = default
    base = registry.base_class
    if isinstance(value, type) and issubclass(value, base):
        return Provided(value(), "class", value.__name__, **facts)
    if isinstance(value, base):
        unavailable = why_unavailable(type(value)) if check_instance else None
        return Provided(value, "instance", type(value).__name__, unavailable=unavailable, **facts)
    if not isinstance(value, str):
        raise MisconfigurationError(
            f"{registry.kind}={value!r} has type {type(value).__name__}; give a registered name or a "
            f"{base.__name__} instance. Installed: {', '.join(registry.names())}."
        )
    entry = registry.resolve(value) if rename is None or value in registry else None
    requested = entry.name if entry is not None else value
    if rename is not None:
        renamed = rename(requested)
        if entry is None or renamed != requested:
            entry = registry.resolve(renamed)
    assert entry is not None
    ensure_available(entry)
    return Provided(create(entry), "name", entry.name, entry.provider, entry, requested, **facts)
