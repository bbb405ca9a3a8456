"""What ``core plugins list`` and ``core env`` report: every plugin and registered name, with its state.

The listing imports plugin modules (which register dotted paths) but no plugin class, unless
``check=True`` asks to import each class and query its availability and devices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from torchplug._host import PluginHost
from torchplug._registry import KINDS, RegistryEntry, why_unavailable

__all__ = ["SCHEMA_VERSION", "EntryReport", "Listing", "collect"]

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
        """Whether anything is broken: a plugin, or (after a check) a registered class."""
        return any(r.state in ("broken", "incompatible") for r in self.host.records) or any(
            e.status == "broken" for e in self.entries
        )

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
    """Build the listing for ``kinds``; with ``check``, import each class and ask it about this machine."""
    host.ensure_loaded()
    listing = Listing(host)
    for kind in kinds:
        registry = host.registry(kind)
        for entry in sorted(registry.entries(), key=lambda e: (e.name, e.provider.label)):
            resolution = registry.resolution(entry.name)
            report = _status(resolution.winner, entry, resolution.rule)
            if check and report.status in ("ok", "unavailable", "shadowed"):
                _check(report)
            if kind == "cluster_environment" and report.status == "ok":
                _detect(report)
            listing.entries.append(report)
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
    try:
        reason = entry.run_probe()
    except Exception as exc:  # a probe is plugin code: its failure is that plugin's, not the listing's
        return EntryReport(entry, "broken", f"availability probe raised {type(exc).__name__}: {exc}")
    return EntryReport(entry, "unavailable", reason) if reason else EntryReport(entry)


def _detect(report: EntryReport) -> None:
    """Ask a cluster environment whether it is detected here (its class is torch-free by contract)."""
    from torchplug.environments.detection import ask

    try:
        cls = report.entry.load()
    except Exception as exc:
        report.status, report.reason = "broken", f"{type(exc).__name__}: {exc}"
        return
    detected, text = ask(cls)
    report.detected = detected
    report.reason = text


def _check(report: EntryReport) -> None:
    start = time.perf_counter()
    check: dict[str, Any] = {"imported": False, "available": None, "device_count": None, "error": None}
    report.check = check
    try:
        cls = report.entry.load()
        check["imported"] = True
        # A class without is_available() (most strategies and precisions) is judged by its entry's
        # probe, so that --check agrees with the status the listing shows without importing.
        has_check = callable(getattr(cls, "is_available", None))
        reason = why_unavailable(cls, report.entry) if has_check else report.entry.run_probe()
        check["available"] = reason is None
        if reason is not None:
            report.status, report.reason = "unavailable", reason
        elif report.entry.kind == "accelerator":
            check["device_count"] = int(cls.auto_device_count())
    except Exception as exc:
        report.status, report.reason = "broken", f"{type(exc).__name__}: {exc}"
        check["error"] = report.reason
    check["seconds"] = round(time.perf_counter() - start, 4)
