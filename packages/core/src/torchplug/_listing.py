"""What ``core plugins list`` and ``core env`` report: every plugin and registered name, with its state.

The listing imports plugin modules (which register dotted paths) but no plugin class, unless
``check=True`` asks to import each class and query its availability and devices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from torchplug._boundary import ask_class, at_boundary, run_probe
from torchplug._deadline import Ticket
from torchplug._discovery import FAILED_STATES, PluginRecord
from torchplug._errors import PluginError
from torchplug._host import PluginHost
from torchplug._registry import KINDS, RegistryEntry

__all__ = ["SCHEMA_VERSION", "EntryReport", "Listing", "check_one", "collect"]

#: Version of the ``--json`` document; bumped only on incompatible changes.
SCHEMA_VERSION: Final = 1

#: Every status a registered name can have, with what it means.
ENTRY_STATUSES: Final[dict[str, str]] = {
    "ok": "usable (with --check: imported and available here)",
    "unavailable": "installed, but cannot run on this machine; the reason says why",
    "broken": "its plugin or its class failed to load; asking for it raises that error",
    "conflict": "several distributions claim the name and none was chosen; asking for it raises",
    "shadowed": "another provider's entry wins this name; reach this one with NAME@PROVIDER",
}


@dataclass(slots=True)
class EntryReport:
    """One registered name as the listing shows it."""

    entry: RegistryEntry[Any]
    status: str = "ok"
    reason: str | None = None
    check: dict[str, Any] | None = None
    detected: bool | None = None  # cluster environments only

    def as_dict(self) -> dict[str, Any]:
        data = self.entry.as_dict()
        data["status"] = self.status
        data["reason"] = self.reason
        if self.detected is not None:
            data["detected"] = self.detected
        if self.check is not None:
            data["check"] = self.check
        return data


@dataclass(slots=True)
class Listing:
    """The whole report: discovery settings, every plugin, every registered name."""

    host: PluginHost
    entries: list[EntryReport] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether anything is broken: a plugin (broken or incompatible), or a registered name."""
        return any(r.state in FAILED_STATES for r in self.host.records) or any(
            e.status == "broken" for e in self.entries
        )

    @property
    def torch_importers(self) -> list[PluginRecord]:
        """The plugins whose loading imported torch (a plugin module must not), in load order."""
        return [r for r in self.host.records if r.imports_torch]

    def as_dict(self, verbose: bool = False) -> dict[str, Any]:
        """The ``--json`` document (schema in ``core plugins list --help`` and the README)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "core_version": next((r.version for r in self.host.records if r.builtin), None),
            "settings": self.host.settings.as_dict(),
            "discovery_ms": round(self.host.load_seconds * 1000, 3),
            "plugins": [record.as_dict(verbose) for record in self.host.records],
            "entries": [report.as_dict() for report in self.entries],
        }


def collect(host: PluginHost, kinds: tuple[str, ...] = KINDS, check: bool = False) -> Listing:
    """Build the listing for ``kinds``; with ``check``, import each class and ask it about this machine.

    Plugin code (probes, ``detect()``, and with ``check`` the imports and ``is_available()``) runs
    at the plugin boundary: third-party code within the plugin deadline, so one plugin that blocks
    is reported (``did not finish ... within N s``) and the listing goes on.
    """
    host.ensure_loaded()
    listing = Listing(host)
    for kind in kinds:
        registry = host.registry(kind)
        for entry in sorted(registry.entries(), key=lambda e: (e.name, e.provider.label)):
            resolution = registry.resolution(entry.name)
            listing.entries.append(_status(resolution.winner, entry, resolution.rule))
    _probe(listing.entries)
    if check:
        _check_each([r for r in listing.entries if r.status in ("ok", "unavailable", "shadowed")])
    _detect_each([r for r in listing.entries if r.entry.kind == "cluster_environment" and r.status == "ok"])
    return listing


def _status(winner: RegistryEntry[Any] | None, entry: RegistryEntry[Any], rule: str) -> EntryReport:
    if entry.error is not None:
        return EntryReport(entry, "broken", f"{type(entry.error).__name__}: {entry.error}")
    dist = entry.provider.distribution or entry.provider.plugin
    if winner is None:
        return EntryReport(
            entry,
            "conflict",
            f"{entry.name!r} is claimed by several distributions; pick with "
            f"'{entry.name}@{dist}' or TORCHPLUG_PREFER={entry.name}={dist}",
        )
    if winner is not entry:
        return EntryReport(
            entry,
            "shadowed",
            f"{entry.name!r} resolves to {winner.provider} ({rule}); use '{entry.name}@{dist}' for this one",
        )
    return EntryReport(entry)


def _probe(reports: list[EntryReport]) -> None:
    """Run the cheap probe of every usable entry that has one (a probe is plugin code: guarded)."""
    probed = [r for r in reports if r.status == "ok" and r.entry.probe is not None]
    results = at_boundary([r.entry for r in probed], _probe_call)
    for report, result in zip(probed, results):
        if isinstance(result, PluginError):
            report.status, report.reason = "broken", _cause(result)
        elif result is not None:
            report.status, report.reason = "unavailable", result


def _probe_call(entry: RegistryEntry[Any]) -> Callable[[Ticket], str | None]:
    def call(ticket: Ticket) -> str | None:
        ticket.phase = "running its availability probe"
        return run_probe(entry)

    return call


def _cause(error: PluginError) -> str:
    """A boundary error as the listing shows it (its message names the entry and its provider)."""
    return f"{type(error).__name__}: {error}"


def _detect_each(reports: list[EntryReport]) -> None:
    """Ask each cluster environment whether it is detected here (its class is torch-free by contract)."""
    results = at_boundary([r.entry for r in reports], _detect_call)
    for report, result in zip(reports, results):
        if isinstance(result, PluginError):
            report.status, report.reason = "broken", _cause(result)
        else:
            report.detected, report.reason = result


def _detect_call(entry: RegistryEntry[Any]) -> Callable[[Ticket], tuple[bool, str]]:
    from torchplug.environments.detection import ask

    def call(ticket: Ticket) -> tuple[bool, str]:
        ticket.phase = "importing its class"
        cls = entry.load()
        ticket.phase = "running detect()"
        return ask(cls)

    return call


def _check_each(reports: list[EntryReport]) -> None:
    results = at_boundary([r.entry for r in reports], _check_call)
    for report, result in zip(reports, results):
        if isinstance(result, PluginError):
            report.status, report.reason = "broken", _cause(result)
            imported = report.entry.is_loaded and report.entry.error is None
            report.check = {"imported": imported, "available": None, "device_count": None, "error": report.reason}
            report.check["seconds"] = None
            continue
        report.check = result
        if result["reason"] is not None:
            report.status, report.reason = "unavailable", result["reason"]
        del result["reason"]


def _check_call(entry: RegistryEntry[Any]) -> Callable[[Ticket], dict[str, Any]]:
    def call(ticket: Ticket) -> dict[str, Any]:
        start = time.perf_counter()
        check: dict[str, Any] = {"imported": False, "available": None, "device_count": None, "error": None}
        ticket.phase = "importing its class"
        cls = entry.load()
        check["imported"] = True
        # A class without is_available() (most strategies and precisions) is judged by its entry's
        # probe, so that --check agrees with the status the listing shows without importing.
        if callable(getattr(cls, "is_available", None)):
            reason = ask_class(cls, entry, ticket)
        else:
            ticket.phase = "running its availability probe"
            reason = run_probe(entry)
        check["available"] = reason is None
        if reason is None and entry.kind == "accelerator":
            ticket.phase = "running auto_device_count()"
            check["device_count"] = int(cls.auto_device_count())
        check["seconds"] = round(time.perf_counter() - start, 4)
        check["reason"] = reason
        return check

    return call


def check_one(report: EntryReport) -> None:
    """Import one listed entry's class and ask it about this machine (``core plugins show``)."""
    _check_each([report])
