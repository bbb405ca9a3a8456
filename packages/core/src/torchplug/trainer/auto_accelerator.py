"""``accelerator="auto"``: every installed accelerator is a candidate; the available one with the highest priority wins.

Nothing is settled silently:

- A candidate that is skipped because something is wrong (its plugin is broken, its name is
  claimed by several distributions, its probe or ``is_available()`` raised) is warned about once
  per process with the full reason, on global rank 0.
- A candidate that works but finds no device here (``accel-cuda`` on a CPU machine) is the normal
  case, not a warning: it is logged at the debug level and listed. So is the generic ``torch``
  accelerator having nothing to serve (torch reports no accelerator, or a dedicated plugin claims
  torch's device type).
- A tie at the top priority is settled by name, in alphabetical order, with a warning that names
  the tie and the two ways to choose.
- ``TORCHPLUG_ACCELERATOR_PRIORITY=name=int,...`` replaces accelerators' priorities.
- ``trainer.describe()`` lists every candidate and why it lost.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from torchplug._boundary import check_availability as registry_check_availability
from torchplug._errors import MisconfigurationError, PluginError, PluginSettingsError
from torchplug._registry import Registry, RegistryEntry
from torchplug.accelerators.accelerator import Accelerator
from torchplug.utilities.warn import reset_warned, warn_once

_log = logging.getLogger(__name__)

__all__ = ["PRIORITY_VARIABLE", "AutoAcceleratorWarning", "Candidate", "Choice", "check_availability", "choose"]

#: Replaces accelerators' ``auto_priority``: ``TORCHPLUG_ACCELERATOR_PRIORITY=torch=60,cpu=-1``.
PRIORITY_VARIABLE: Final = "TORCHPLUG_ACCELERATOR_PRIORITY"


class AutoAcceleratorWarning(UserWarning):
    """``accelerator="auto"`` skipped an installed accelerator, or settled a tie between two."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One installed accelerator name as ``accelerator="auto"`` saw it.

    Attributes:
        name: The registry name.
        provider: Who provides it (``"accel-cuda 0.1.0"``).
        priority: Its priority for "auto" (after ``TORCHPLUG_ACCELERATOR_PRIORITY``); None when skipped.
        reason: Why it cannot be used here; None when it is available.
        warn: Whether being skipped is a fault the user is warned about (a broken plugin, a name
            conflict, a probe that raised); False: logged at the debug level and listed only.
        entry: The registry entry (None when the name is ambiguous).
    """

    name: str
    provider: str
    priority: int | None
    reason: str | None
    warn: bool
    entry: RegistryEntry[Accelerator] | None

    @property
    def label(self) -> str:
        """``name (provider)``."""
        return f"{self.name} ({self.provider})"

    @property
    def state(self) -> str:
        """``available``, ``unavailable``, ``broken``, ``conflict``, ``raised`` or ``nothing to serve``."""
        if self.reason is None:
            return "available"
        prefix = self.reason.partition(":")[0]
        return prefix if prefix in _STATES else "raised"


_STATES: Final = frozenset({"unavailable", "broken", "conflict", "nothing to serve"})


@dataclass(frozen=True, slots=True)
class Choice:
    """The outcome: the winning candidate, the reason in words, and a line for each candidate that lost."""

    winner: Candidate
    why: str
    details: tuple[str, ...]

    def create(self) -> Accelerator:
        """A new instance of the winner (its availability was checked while choosing)."""
        assert self.winner.entry is not None
        return self.winner.entry.create()


def check_availability(entry: RegistryEntry[Accelerator]) -> tuple[type[Accelerator] | None, str | None]:
    """Load ``entry``'s class and ask whether it can run here: ``(class, None)`` or ``(class or None, reason)``.

    The plugin boundary of "auto" is :func:`torchplug._boundary.check_availability`: the cheap probe
    first (nothing is imported when it says no), then the import and ``is_available()``, third-party
    code within ``TORCHPLUG_PLUGIN_TIMEOUT``. Whatever the plugin code raised, or a missed deadline,
    becomes the reason here: one accelerator never stops "auto".
    """
    try:
        reason = registry_check_availability(entry)
    except PluginError as exc:  # BrokenPluginError / PluginTimeoutError, naming the distribution
        return None, f"broken: {exc}"
    if reason is not None:
        return None, f"unavailable: {reason}"
    return entry.load(), None


def priority_overrides(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """``TORCHPLUG_ACCELERATOR_PRIORITY`` as ``{name: priority}``.

    Raises:
        PluginSettingsError: An item is not ``NAME=INT``.
    """
    value = (os.environ if environ is None else environ).get(PRIORITY_VARIABLE, "")
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, number = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError(item)
            overrides[name.strip().lower()] = int(number)
        except ValueError:
            raise PluginSettingsError(
                f"{PRIORITY_VARIABLE} has the item {item!r}, which is not NAME=INT. "
                f"Hint: {PRIORITY_VARIABLE}=torch=60 ranks the generic torch accelerator above CUDA (50)."
            ) from None
    return overrides


def survey(registry: Registry[Accelerator], overrides: Mapping[str, int]) -> list[Candidate]:
    """Every registered accelerator name, each checked for this machine (see :func:`check_availability`)."""
    candidates = []
    for name in registry.names():
        resolution = registry.resolution(name)
        winner = resolution.winner
        if winner is None:
            try:
                registry.resolve(name)
            except PluginError as exc:  # the conflict error, naming the providers and the ways to choose
                providers = " and ".join(str(c.provider) for c in resolution.candidates)
                candidates.append(
                    Candidate(
                        name=name, provider=providers, priority=None, reason=f"conflict: {exc}", warn=True, entry=None
                    )
                )
            continue
        cls, reason = check_availability(winner)
        warn = reason is not None and not reason.startswith("unavailable:")  # no device here is not a fault
        if cls is None and winner.is_loaded:  # imported, and is_available() said no: its class still tells
            cls = winner.load()
        if cls is not None and _is_generic(cls):
            reason, warn = _generic_reason(cls, registry)
        priority = None
        if reason is None and cls is not None:
            priority = overrides.get(name, int(cls.auto_priority))
        candidates.append(
            Candidate(
                name=name, provider=str(winner.provider), priority=priority, reason=reason, warn=warn, entry=winner
            )
        )
    return candidates


def _is_generic(cls: type[Accelerator]) -> bool:
    from torchplug.accelerators.torch_device import TorchDeviceAccelerator

    return issubclass(cls, TorchDeviceAccelerator)


def _generic_reason(cls: type[Accelerator], registry: Registry[Accelerator]) -> tuple[str | None, bool]:
    """The generic accelerator's reason, asked against this registry; only torch raising is warned about."""
    from torchplug.accelerators.torch_device import idle_reason, serving_reason

    try:
        idle = idle_reason(registry)
        if idle is not None:
            return f"nothing to serve: {idle}", False
        reason = serving_reason(cls.device_type or None, registry)
    except Exception as exc:  # torch's own answers raised: told like any other plugin failure
        return f"asking torch raised {type(exc).__name__}: {exc}", True
    return (None if reason is None else f"unavailable: {reason}"), False


def choose(registry: Registry[Accelerator], environ: Mapping[str, str] | None = None) -> Choice:
    """Pick the accelerator for ``accelerator="auto"``, warning about skipped candidates and ties.

    Raises:
        PluginSettingsError: ``TORCHPLUG_ACCELERATOR_PRIORITY`` is malformed, or names no installed accelerator.
        MisconfigurationError: No candidate is available.
    """
    overrides = priority_overrides(environ)
    unknown = sorted(set(overrides) - set(registry.names()))
    if unknown:
        raise PluginSettingsError(
            f"{PRIORITY_VARIABLE} names {', '.join(map(repr, unknown))}, which is not an installed accelerator. "
            f"Installed: {', '.join(registry.names())}."
        )
    candidates = survey(registry, overrides)
    for candidate in candidates:
        if candidate.warn:
            _warn_once(f"accelerator='auto' skipped {candidate.label}: {candidate.reason}")
        elif candidate.reason is not None:
            _log.debug("accelerator='auto' skipped %s: %s", candidate.label, candidate.reason)
    available = sorted((c for c in candidates if c.priority is not None), key=lambda c: (-(c.priority or 0), c.name))
    if not available:
        listed = "; ".join(f"{c.label}: {c.reason}" for c in candidates)
        raise MisconfigurationError(f"accelerator='auto' found no usable accelerator ({listed}).")
    winner = available[0]
    tied = [c for c in available if c.priority == winner.priority]
    why = f"accelerator='auto': highest priority available ({winner.priority})"
    if len(available) > 1:
        why += "; also available: " + ", ".join(f"{c.name} ({c.priority})" for c in available[1:])
    skipped = [c for c in candidates if c.priority is None]
    if skipped:
        why += "; skipped: " + "; ".join(f"{c.name}: {c.state}" for c in skipped)
    why += f"; from {winner.provider}"
    if winner.entry is not None and winner.entry.is_loaded and _is_generic(winner.entry.load()):
        from torchplug.accelerators.torch_device import current_device_type

        why += f", serving torch's device type {current_device_type()!r}"
    if winner.name in overrides:
        why += f"; priority set by {PRIORITY_VARIABLE}"
    if len(tied) > 1:
        why += f"; tie with {', '.join(repr(c.name) for c in tied[1:])} settled by name"
        _warn_once(_tie_message(winner, tied))
    details = tuple(_lost(c, winner) for c in candidates if c is not winner)
    return Choice(winner, why, details)


def _lost(candidate: Candidate, winner: Candidate) -> str:
    if candidate.priority is None:
        return f"{candidate.label}: skipped, {candidate.reason}"
    if candidate.priority == winner.priority:
        return f"{candidate.label}: lost the tie at priority {candidate.priority} (names settle ties alphabetically)"
    return f"{candidate.label}: lost, priority {candidate.priority} < {winner.priority}"


def _tie_message(winner: Candidate, tied: list[Candidate]) -> str:
    names = " and ".join(repr(c.name) for c in tied)
    other = tied[1].name
    return (
        f"accelerator='auto': {names} are available with the same priority ({winner.priority}); chose "
        f"{winner.name!r}, the first by name. Hint: pass accelerator={other!r} to use the other, or set "
        f"{PRIORITY_VARIABLE}={other}={(winner.priority or 0) + 1} to rank it first."
    )


def _warn_once(message: str) -> None:
    warn_once(message, AutoAcceleratorWarning)


def _reset_warnings() -> None:
    """Forget what was warned (for tests that check the warnings of a fresh process)."""
    reset_warned()
