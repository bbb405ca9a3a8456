"""``core env``: this machine's torchplug set-up in one report, to paste into bug reports.

It imports torch and every registered class (to check them), asks each accelerator for its
devices, runs cluster-environment detection, and collects each plugin's own section (the
``torchplug_environment_report`` hook). Whatever fails is reported as a value; the command
itself does not fail for it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from typing import Any, Final

from torchplug._host import PluginHost
from torchplug._listing import Listing, collect
from torchplug.utilities.imports import distribution_version
from torchplug.utilities.printable import printable

__all__ = ["SCHEMA_VERSION", "add_parser", "collect_report", "format_report"]

#: Version of the ``--json`` document; bumped only on incompatible changes.
SCHEMA_VERSION: Final = 1

#: The libraries whose versions matter in a bug report, besides torch and the plugin distributions.
_LIBRARIES: Final = ("pluggy", "packaging", "fsspec", "tqdm", "PyYAML", "jsonargparse", "numpy", "tensorboard")

JSON_HELP: Final = f"""--json prints one object (schema_version {SCHEMA_VERSION}):
  versions {{python, implementation, executable, platform, machine, cpus, torch {{version, cuda, debug,
            threads, distributed, backends, error}}, core, libraries {{name: version}}}}
  plugins: [{{name, module, distribution, version, state, reason, requires_core, builtin, load_ms}}]
  devices: [{{accelerator, provider, status, available, device_count, reason}}]
  entries: [{{kind, name, provider, status, reason}}] (every registered name, checked)
  cluster_environment {{name, trace: [...], error}}
  settings {{TORCHPLUG_*: value}}
  reports {{distribution: the plugin's own section, or {{"error": ...}}}}"""


def add_parser(commands: Any) -> None:
    """Add ``env`` to the ``core`` command."""
    from torchplug.cli._main import EXIT_CODES

    parser = commands.add_parser(
        "env",
        help="a report for bug reports: versions, plugins, devices, cluster environment",
        description="Report the versions of Python, torch, core and every plugin distribution, the plugins and "
        "their states, the usable devices, the detected cluster environment and each plugin's own "
        "section. Imports torch and every registered class.",
        epilog=f"{JSON_HELP}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of text")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from torchplug.cli._plugins import _host

    report = collect_report(_host())
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(report))
    return 0


# -- collecting ---------------------------------------------------------------------------------


def collect_report(host: PluginHost) -> dict[str, Any]:
    """The whole report as JSON-ready data (see :data:`JSON_HELP`)."""
    listing = collect(host, check=True)
    return {
        "schema_version": SCHEMA_VERSION,
        "versions": _versions(host),
        "plugins": [record.as_dict() for record in host.records],
        "devices": _devices(listing),
        "entries": [_entry(report.as_dict()) for report in listing.entries],
        "cluster_environment": _cluster(host),
        "settings": _settings(),
        "reports": _reports(host),
    }


def _guard(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception as exc:  # a diagnostic reports failures as values
        return {"error": f"{type(exc).__name__}: {exc}"}


def _versions(host: PluginHost) -> dict[str, Any]:
    from torchplug._discovery import core_version

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": cpus,
        "torch": _guard(_torch),
        "core": core_version(),
        "libraries": {name: distribution_version(name) for name in _LIBRARIES},
    }


def _torch() -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    backends = []
    if dist.is_available():
        checks = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available, "mpi": dist.is_mpi_available}
        backends = [name for name, available in checks.items() if available()]
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "debug": bool(torch.version.debug),
        "threads": torch.get_num_threads(),
        "distributed": dist.is_available(),
        "backends": backends,
    }


def _devices(listing: Listing) -> list[dict[str, Any]]:
    devices = []
    for report in listing.entries:
        if report.entry.kind != "accelerator":
            continue
        check = report.check or {}
        devices.append(
            {
                "accelerator": report.entry.name,
                "provider": report.entry.provider.label,
                "status": report.status,
                "available": check.get("available"),
                "device_count": check.get("device_count"),
                "reason": report.reason,
            }
        )
    return devices


def _entry(data: dict[str, Any]) -> dict[str, Any]:
    provider = data["provider"]
    label = f"{provider['distribution']}=={provider['version']}" if provider["distribution"] else provider["plugin"]
    return {
        "kind": data["kind"],
        "name": data["name"],
        "provider": label,
        "status": data["status"],
        "reason": data["reason"],
    }


def _cluster(host: PluginHost) -> dict[str, Any]:
    from torchplug.environments.detection import select_cluster_environment

    try:
        selection = select_cluster_environment(host.registry("cluster_environment"))
    except Exception as exc:  # a forced unknown name, or nothing detected: that is the finding
        return {"name": None, "trace": [], "error": f"{type(exc).__name__}: {exc}"}
    return {"name": selection.name, "trace": list(selection.trace), "error": None}


def _settings() -> dict[str, str | None]:
    from torchplug._settings import ENV_VARS as DISCOVERY_VARS
    from torchplug.environments.detection import ENV_VARS as DETECTION_VARS

    names = {*DISCOVERY_VARS, *DETECTION_VARS, *(k for k in os.environ if k.startswith("TORCHPLUG_"))}
    return {name: os.environ.get(name) for name in sorted(names)}


def _reports(host: PluginHost) -> dict[str, Any]:
    reports: dict[str, Any] = {}
    for record, result, error in host.call_each("torchplug_environment_report"):
        key = record.distribution or record.name
        if error is not None:
            reports[key] = {"error": f"{type(error).__name__}: {error}"}
        elif result is not None:
            reports[key] = result
    return reports


# -- text ---------------------------------------------------------------------------------------


def format_report(report: dict[str, Any]) -> str:
    """The report as text: one titled section each, aligned, ready to paste into an issue."""
    parts = ["torchplug environment (core env)\n"]
    parts += [
        _section(title, lines)
        for title, lines in (
            ("Versions", _version_lines(report["versions"], report["plugins"])),
            ("Plugins", _plugin_lines(report["plugins"])),
            ("Devices", _device_lines(report["devices"])),
            ("Registered names", _entry_lines(report["entries"])),
            ("Cluster environment", _cluster_lines(report["cluster_environment"])),
            ("Settings", [f"{k}={v}" for k, v in report["settings"].items() if v is not None] or ["(none set)"]),
            ("Plugin reports", _report_lines(report["reports"])),
        )
    ]
    return "\n".join(parts)


def _section(title: str, lines: list[str]) -> str:
    return title + "\n" + "".join(f"  {printable(line)}\n" for line in lines)


def _columns(rows: list[list[str]]) -> list[str]:
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _version_lines(versions: dict[str, Any], plugins: list[dict[str, Any]]) -> list[str]:
    torch = versions["torch"]
    if "error" in torch:
        torch_text = f"not importable: {torch['error']}"
    else:
        torch_text = (
            f"{torch['version']} (CUDA build: {torch['cuda'] or 'none'}, threads: {torch['threads']}, "
            f"distributed backends: {', '.join(torch['backends']) or 'none'})"
        )
    rows = [
        ["python", f"{versions['python']} {versions['implementation']} ({versions['executable']})"],
        ["platform", f"{versions['platform']} ({versions['machine']}, {versions['cpus']} CPUs usable)"],
        ["torch", torch_text],
        ["core", versions["core"]],
    ]
    seen = {"core"}
    for plugin in plugins:
        dist = plugin["distribution"]
        if dist and dist not in seen:
            seen.add(dist)
            rows.append([dist, str(plugin["version"])])
    rows += [[name, version] for name, version in versions["libraries"].items() if version]
    return _columns(rows)


def _plugin_lines(plugins: list[dict[str, Any]]) -> list[str]:
    rows = [["NAME", "DISTRIBUTION", "STATE", "REASON"]]
    rows += [
        [
            p["name"],
            f"{p['distribution']}=={p['version']}" if p["distribution"] else "TORCHPLUG_PLUGINS",
            p["state"],
            p["reason"] or "",
        ]
        for p in plugins
    ]
    return _columns(rows)


def _device_lines(devices: list[dict[str, Any]]) -> list[str]:
    rows = [["ACCELERATOR", "PROVIDER", "AVAILABLE", "DEVICES", "REASON"]]
    for device in devices:
        available = {True: "yes", False: "no", None: "-"}[device["available"]]
        count = "-" if device["device_count"] is None else str(device["device_count"])
        reason = device["reason"] or ("" if device["status"] == "ok" else device["status"])
        rows.append([device["accelerator"], device["provider"], available, count, reason])
    return _columns(rows)


def _entry_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines = []
    for kind in dict.fromkeys(e["kind"] for e in entries if e["kind"] != "accelerator"):  # those: under Devices
        ok = [e["name"] for e in entries if e["kind"] == kind and e["status"] == "ok"]
        lines.append(f"{kind}: {', '.join(ok) or '(none usable)'}")
        lines += [
            f"  {e['name']} ({e['provider']}): {e['status']}: {e['reason']}"
            for e in entries
            if e["kind"] == kind and e["status"] != "ok"
        ]
    return lines


def _cluster_lines(cluster: dict[str, Any]) -> list[str]:
    if cluster["error"]:
        return [f"none: {cluster['error']}"]
    return [f"{cluster['name']}", *(f"  {line}" for line in cluster["trace"])]


def _report_lines(reports: dict[str, Any]) -> list[str]:
    import yaml  # here, not at the top: 'core plugins list' builds this parser too and must stay fast

    if not reports:
        return ["(no plugin contributed a section)"]
    lines = []
    for name, section in reports.items():
        lines.append(f"{name}:")
        text = yaml.safe_dump(
            json.loads(json.dumps(section, default=str)), default_flow_style=False, sort_keys=False, width=1000
        )
        lines += [f"  {line}" for line in text.rstrip().splitlines()]
    return lines
