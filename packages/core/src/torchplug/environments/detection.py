"""Automatic choice of the cluster environment, with a trace of every decision.

Every registered environment is asked, highest ``detect_priority`` first (ties by name), and the
first whose ``detect()`` says yes is used; ``local`` (priority 0) always says yes. Two environment
variables change this, for the cases detection gets wrong:

* ``TORCHPLUG_CLUSTER_ENVIRONMENT=<name>`` uses that environment without asking any.
* ``TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS=<name>,<name>`` leaves those out of detection (for
  example ``slurm`` to run in a SLURM allocation as if on a plain machine).

An environment's ``detect_reason()`` names the evidence behind its answer (``"SLURM_NTASKS=2"``);
the trace shows it in parentheses.

Plugins are isolated here as in discovery: a class that fails to import, or a ``detect()`` that
raises, is reported in the trace and passed over; it never stops the others. A third-party
environment's import and ``detect()`` run within the plugin deadline (``TORCHPLUG_PLUGIN_TIMEOUT``),
so one that blocks is reported as broken instead of hanging the Trainer. Imports no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast

from torchplug._errors import MisconfigurationError, PluginError, SettingsError
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.utilities.env_vars import NAME_PATTERN, env_list

if TYPE_CHECKING:
    from torchplug._deadline import Ticket
    from torchplug._registry import Registry, RegistryEntry

__all__ = [
    "CLUSTER_ENVIRONMENT_VAR",
    "ENV_VARS",
    "SKIP_CLUSTER_ENVIRONMENTS_VAR",
    "Selection",
    "select_cluster_environment",
]

CLUSTER_ENVIRONMENT_VAR: Final = "TORCHPLUG_CLUSTER_ENVIRONMENT"
"""Names the cluster environment to use (``name`` or ``name@provider``); detection is then skipped.

Its ``detect()`` need not agree. An unknown name is an error that lists the registered names.
"""

SKIP_CLUSTER_ENVIRONMENTS_VAR: Final = "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS"
"""Comma-separated names (or aliases) that automatic detection leaves out, for example ``slurm,mpi``.

This is the switch that turns a detection off. Names not registered here are ignored (and noted
in the trace), so one setting can serve machines with different plugins installed.
"""

#: Every variable read here, with what it does (for help texts and ``core env``).
ENV_VARS: Final[dict[str, str]] = {
    CLUSTER_ENVIRONMENT_VAR: "the cluster environment to use (a registered name); detection is skipped",
    SKIP_CLUSTER_ENVIRONMENTS_VAR: "comma-separated cluster environment names that detection leaves out",
}


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome of :func:`select_cluster_environment`.

    Attributes:
        environment: A new instance of the chosen environment.
        name: Its registry name.
        trace: Human-readable lines, shown by ``trainer.describe()``: first the environments
            left out (``"slurm: skipped (TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)"``, ``"x: broken: ..."``),
            then those asked, in order, up to the chosen one (``"torchelastic: not detected
            (TORCHELASTIC_RUN_ID not set)"``, ``"local: detected (...)"``). One line when forced.
    """

    environment: ClusterEnvironment
    name: str
    trace: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Candidate:
    name: str
    entry: RegistryEntry
    cls: type[ClusterEnvironment]
    priority: int


def select_cluster_environment(registry: Registry, environ: Mapping[str, str] | None = None) -> Selection:
    """Choose the cluster environment this process runs under.

    Args:
        registry: The ``cluster_environment`` registry; every name's winning entry is considered.
        environ: Where to read :data:`CLUSTER_ENVIRONMENT_VAR` and
            :data:`SKIP_CLUSTER_ENVIRONMENTS_VAR` (default ``os.environ``). The environments'
            own ``detect()`` always read ``os.environ``.

    Returns:
        The chosen environment (a new instance), its name, and the trace of the decision.

    Raises:
        PluginError: The forced environment is unknown, ambiguous or broken (the message names
            the variable and lists the registered environments).
        SettingsError: :data:`SKIP_CLUSTER_ENVIRONMENTS_VAR` holds an item that is not a name.
        MisconfigurationError: No environment detected, which only happens when ``local`` is
            skipped or not registered.
    """
    env = os.environ if environ is None else environ
    forced = env.get(CLUSTER_ENVIRONMENT_VAR, "").strip()
    if forced:
        return _forced(registry, forced)
    skip = {name.lower() for name in env_list(SKIP_CLUSTER_ENVIRONMENTS_VAR, environ=env)}
    trace: list[str] = []
    candidates = _candidates(registry, skip, trace, env.get(SKIP_CLUSTER_ENVIRONMENTS_VAR, ""))
    for candidate in candidates:
        detected, line = _ask(candidate)
        trace.append(line)
        if detected:
            return Selection(candidate.entry.create(), candidate.name, tuple(trace))
    raise MisconfigurationError(
        f"No cluster environment was detected: {'; '.join(trace) or 'none is registered'}. Hint: remove 'local' "
        f"from {SKIP_CLUSTER_ENVIRONMENTS_VAR}, or name one with {CLUSTER_ENVIRONMENT_VAR}=<name>."
    )


def _forced(registry: Registry, forced: str) -> Selection:
    if not NAME_PATTERN.match(forced):
        raise MisconfigurationError(
            f"{CLUSTER_ENVIRONMENT_VAR}={forced!r} is not a registered name (letters, digits and '_', '-', '.', "
            f"'+', optionally @provider). Installed: {', '.join(registry.names())}."
        )
    try:
        entry = registry.resolve(forced)
        entry.load()
    except PluginError as exc:  # the registry's message lists the installed names and the fixes
        raise type(exc)(
            f"{CLUSTER_ENVIRONMENT_VAR}={forced!r} cannot be used: {exc} Or unset {CLUSTER_ENVIRONMENT_VAR} "
            "to detect the cluster environment automatically."
        ) from exc
    line = f"{entry.name}: forced by {CLUSTER_ENVIRONMENT_VAR}={forced}"
    from torchplug._boundary import at_boundary

    (answer,) = at_boundary([entry], _forced_call)
    if isinstance(answer, PluginError):  # the forced choice stands whatever detect() does
        line += f" (its detect() failed: {answer}; used anyway)"
    elif answer:
        line += f" ({answer}; used anyway)"
    return Selection(entry.create(), entry.name, (line,))


def _forced_call(entry: RegistryEntry) -> Callable[[Ticket], str | None]:
    def call(ticket: Ticket) -> str | None:
        ticket.phase = "running detect()"
        try:
            return None if entry.load().detect() else "its detect() says no"
        except Exception as exc:  # plugin boundary: said in the trace
            return f"its detect() raised {type(exc).__name__}: {exc}"

    return call


def _candidates(registry: Registry, skip: set[str], trace: list[str], given: str) -> list[_Candidate]:
    """Each registered name's winning entry, loaded, sorted by priority (highest first), then name.

    Skipped names are not even imported. Ambiguous, skipped and broken names go to ``trace``.
    """
    chosen: list[tuple[str, RegistryEntry]] = []
    known: set[str] = set()
    for name in registry.names():
        resolution = registry.resolution(name)
        entry = resolution.winner
        known.update(key for c in resolution.candidates for key in (c.name, *c.aliases))
        if entry is None:
            providers = ", ".join(str(c.provider) for c in resolution.candidates)
            trace.append(
                f"{name}: not asked (provided by several distributions: {providers}; "
                f"pick one with TORCHPLUG_PREFER={name}=<distribution>)"
            )
        elif skip & {name, *entry.aliases}:
            trace.append(f"{name}: skipped ({SKIP_CLUSTER_ENVIRONMENTS_VAR})")
        else:
            chosen.append((name, entry))
    _refuse_unknown_skips(skip - known, known, given)
    found = _load_each(chosen, trace)
    trace += [f"{name}: not installed (named in {SKIP_CLUSTER_ENVIRONMENTS_VAR})" for name in sorted(skip - known)]
    return sorted(found, key=lambda c: (-c.priority, c.name))


def _refuse_unknown_skips(unregistered: set[str], known: set[str], given: str) -> None:
    """A skipped name that no package of torchplug's provides is a typo: refused, with the names there are.

    The name of a first-party environment whose package is not installed here (``slurm`` without
    env-slurm) is accepted: one job script may serve machines with and without it.
    """
    from torchplug._install_hints import INSTALL_HINTS

    first_party = INSTALL_HINTS["cluster_environment"]
    unknown = sorted(unregistered - first_party.keys())
    if unknown:
        elsewhere = sorted(first_party.keys() - known)
        raise SettingsError(
            f"{SKIP_CLUSTER_ENVIRONMENTS_VAR}={given!r} names {', '.join(map(repr, unknown))}, which is no cluster "
            f"environment. Registered here: {', '.join(sorted(known))}"
            + (f"; from packages not installed here: {', '.join(elsewhere)}" if elsewhere else "")
            + ". Hint: correct the name or remove it."
        )


def _load_each(chosen: list[tuple[str, RegistryEntry]], trace: list[str]) -> list[_Candidate]:
    """Import each environment class and read its priority at the plugin boundary (one worker for all)."""
    from torchplug._boundary import at_boundary

    found: list[_Candidate] = []
    results = at_boundary([entry for _, entry in chosen], _priority_call)
    for (name, entry), result in zip(chosen, results):
        if isinstance(result, PluginError):  # a broken environment never stops detection
            cause = entry.error or result
            trace.append(f"{name}: broken: {type(cause).__name__}: {cause} (from {entry.provider})")
        else:
            cls, priority = result
            found.append(_Candidate(name, entry, cls, priority))
    return found


def _priority_call(entry: RegistryEntry) -> Callable[[Ticket], tuple[type[ClusterEnvironment], int]]:
    def call(ticket: Ticket) -> tuple[type[ClusterEnvironment], int]:
        ticket.phase = "importing its class"
        cls = cast("type[ClusterEnvironment]", entry.load())  # load() checked the base class
        return cls, int(cls.detect_priority)

    return call


def _detect_call(entry: RegistryEntry) -> Callable[[Ticket], tuple[bool, str]]:
    def call(ticket: Ticket) -> tuple[bool, str]:
        ticket.phase = "running detect()"
        return ask(cast("type[ClusterEnvironment]", entry.load()))

    return call


def ask(cls: type[ClusterEnvironment]) -> tuple[bool, str]:
    """Ask ``cls.detect()`` and ``cls.detect_reason()`` inside a guard: (detected, ``"detected (evidence)"``).

    A ``detect()`` that raises counts as not detected, with the error as the text.
    """
    try:
        detected = bool(cls.detect())
    except Exception as exc:  # plugin boundary
        return False, f"broken: detect() raised {type(exc).__name__}: {exc}"
    text = "detected" if detected else "not detected"
    try:
        reason = cls.detect_reason()
    except Exception as exc:  # plugin boundary: the explanation is optional
        reason = f"detect_reason() raised {type(exc).__name__}: {exc}"
    return detected, f"{text} ({reason})" if reason else text


def _ask(candidate: _Candidate) -> tuple[bool, str]:
    from torchplug._boundary import at_boundary

    (answer,) = at_boundary([candidate.entry], _detect_call)
    if isinstance(answer, PluginError):
        return False, f"{candidate.name}: broken: {answer}"
    detected, text = answer
    return detected, f"{candidate.name}: {text}"
