"""``core plugins list``, ``show``, ``verify`` (the conformance suite) and ``new`` (a package scaffold)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
from typing import Any, Final, TextIO

from torchplug._discovery import STATES, canonicalize_name
from torchplug._host import PluginHost
from torchplug._listing import ENTRY_STATUSES, SCHEMA_VERSION, EntryReport, Listing, collect
from torchplug._registry import KINDS
from torchplug._settings import ENV_VARS, PluginSettings
from torchplug.utilities.printable import printable, printable_lines

__all__ = ["add_parser"]

_KIND_ALIASES: Final = {
    **{kind: kind for kind in KINDS},
    **{f"{kind}s": kind for kind in KINDS},
    "io": "checkpoint_io",
    "checkpoint-io": "checkpoint_io",
    "env": "cluster_environment",
    "environment": "cluster_environment",
    "cluster-environment": "cluster_environment",
}

JSON_SCHEMA_HELP: Final = f"""--json prints one object (schema_version {SCHEMA_VERSION}):
  core_version, settings {{autoload, requested, blocked, strict, prefer, timeout}}, discovery_ms,
  plugins: [{{name, module, distribution, version, state, reason, requires_core, builtin, load_ms, imports_torch}}]
    (imports_torch: loading the plugin imported torch, which a plugin module must not do; the
    table lists it with the time it took, and --json says so on stderr)
  entries: [{{kind, name, aliases, target, description, init_params,
             provider {{plugin, distribution, version, builtin}}, status, reason,
             detected (cluster environments only: whether detect() says yes here),
             check {{imported, available, device_count, error, seconds}} (with --check)}}]
plugin states: {", ".join(STATES)}
entry statuses: {", ".join(ENTRY_STATUSES)}"""


def add_parser(commands: Any) -> None:
    """Add ``plugins list`` and ``plugins show`` to the ``core`` command."""
    from torchplug.cli._main import EXIT_CODES

    env_help = "environment variables:\n" + "\n".join(f"  {k}  {v}" for k, v in ENV_VARS.items())
    plugins = commands.add_parser("plugins", help="list and inspect installed plugins")
    sub = plugins.add_subparsers(dest="plugins_command", metavar="SUBCOMMAND", required=True)

    listing = sub.add_parser(
        "list",
        help="list every plugin and registered name with its state",
        description="List every discovered plugin and every registered name, with provider and state. "
        "Imports no torch unless --check is given.",
        epilog=f"{JSON_SCHEMA_HELP}\n\n{env_help}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--kind", type=_kind, help=f"only this kind ({', '.join(KINDS)})")
    listing.add_argument("--json", action="store_true", help="print a JSON document instead of a table")
    listing.add_argument(
        "--check",
        action="store_true",
        help="import each class, ask if it can run here and count devices (imports torch)",
    )
    listing.add_argument("-v", "--verbose", action="store_true", help="show module paths, load times and tracebacks")
    listing.set_defaults(handler=_list)

    show = sub.add_parser(
        "show",
        help="everything about one name or plugin",
        description="Show one registered name (or plugin) in full, importing its class to check it.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("name", help="a registered name or alias, NAME@PROVIDER, or a plugin/distribution name")
    show.add_argument("--kind", type=_kind, help="only look among this kind")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(handler=_show)
    add_vendor_kit_parsers(sub)


def _kind(value: str) -> str:
    kind = _KIND_ALIASES.get(value.lower())
    if kind is None:
        raise argparse.ArgumentTypeError(f"unknown kind {value!r}; choose from {', '.join(KINDS)}")
    return kind


def _host() -> PluginHost:
    # The listing exists to show failures, so it never raises on them; the exit code reports them.
    settings = PluginSettings.from_env()
    return PluginHost(dataclasses.replace(settings, strict=False))


def _exit_code(listing: Listing) -> int:
    """1 when a plugin is broken or incompatible, or a listed name is broken (see EXIT_CODES)."""
    return 1 if listing.failed else 0


def _list(args: argparse.Namespace) -> int:
    kinds = (args.kind,) if args.kind else KINDS
    listing = collect(_host(), kinds, check=args.check)
    if args.json:
        json.dump(listing.as_dict(verbose=args.verbose), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(listing, args.verbose, args.check)
    _flag_torch_importers(listing, sys.stderr if args.json else sys.stdout)
    return _exit_code(listing)


def _print_table(listing: Listing, verbose: bool, check: bool) -> None:
    headers = ["NAME", "KIND", "ALIASES", "PROVIDER", "STATUS", "DESCRIPTION"]
    if verbose:
        headers.insert(5, "TARGET")
    if check:
        headers.insert(5, "DEVICES")
    rows = [_row(report, verbose, check) for report in listing.entries]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    total = shutil.get_terminal_size((160, 24)).columns
    out = sys.stdout
    out.write(_line(headers, widths, total) + "\n")
    for report, row in zip(listing.entries, rows):
        out.write(_line(row, widths, total) + "\n")
        if report.reason and (report.status != "ok" or report.detected is not None):
            out.write(f"    -> {printable(report.reason)}\n")
    _print_plugins(listing, verbose)


def _row(report: EntryReport, verbose: bool, check: bool) -> list[str]:
    entry = report.entry
    row = [
        entry.name,
        entry.kind,
        ",".join(entry.aliases) or "-",
        entry.provider.label,
        report.status,
        entry.description,
    ]
    if verbose:
        row.insert(5, entry.target_path)
    if check:
        count = (report.check or {}).get("device_count")
        row.insert(5, "-" if count is None else str(count))
    return [printable(cell) for cell in row]


def _line(cells: list[str], widths: list[int], total: int) -> str:
    text = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()
    return text if len(text) <= total or not sys.stdout.isatty() else text[: total - 1] + "…"


def _print_plugins(listing: Listing, verbose: bool) -> None:
    records = listing.host.records if verbose else listing.host.failed_plugins()
    if not records:
        return
    out = sys.stdout
    out.write("\nPlugins:\n" if verbose else "\nPlugins not loaded:\n")
    for record in records:
        origin = f"{record.distribution}=={record.version}" if record.distribution else "TORCHPLUG_PLUGINS"
        detail = f" ({record.load_seconds * 1000:.1f} ms, {record.value})" if verbose else ""
        detail += " (imported torch)" if record.imports_torch else ""
        out.write(f"  {printable(record.name):<16} {record.state:<12} {printable(origin + detail)}\n")
        if record.reason:
            out.write(f"    -> {printable(record.reason)}\n")
        if verbose and record.traceback:
            out.write(_traceback(record.traceback, "       "))
    if not verbose:
        out.write("Run with -v for tracebacks and load times.\n")


def _flag_torch_importers(listing: Listing, out: TextIO) -> None:
    """Name each plugin whose loading imported torch while listing, with the time that loading took."""
    records = listing.torch_importers
    if not records:
        return
    out.write("\nPlugins that imported torch while listing (a plugin module must not):\n")
    for record in records:
        origin = f"{record.distribution}=={record.version}" if record.distribution else record.value
        out.write(f"  {printable(record.name):<16} {printable(origin)}  loading it took {record.load_seconds:.2f} s\n")
    out.write(
        "    -> Hint: register 'module:Class' paths and import torch only in those modules, "
        "so that listing stays fast.\n"
    )


def _traceback(text: str, indent: str) -> str:
    """A plugin's traceback, one escaped line behind a ``|`` gutter each: none of its lines can pass for ours."""
    return "".join(f"{indent}| {line}\n" for line in printable_lines(text.rstrip()))


def _show(args: argparse.Namespace) -> int:
    kinds = (args.kind,) if args.kind else KINDS
    host = _host()
    listing = collect(host, kinds)
    key, _, provider = args.name.lower().partition("@")
    matches = [
        r
        for r in listing.entries
        if key in (r.entry.name, *r.entry.aliases) and (not provider or r.entry.provider.matches(provider))
    ]
    wanted = canonicalize_name(args.name)
    records = [
        r for r in host.records if wanted in (canonicalize_name(r.name), canonicalize_name(r.distribution or ""))
    ]
    if not matches and not records:
        known = sorted({r.entry.name for r in listing.entries})
        print(
            f"core: error: no plugin or registered name {args.name!r}. Installed names: {printable(', '.join(known))}. "
            "Hint: core plugins list",
            file=sys.stderr,
        )
        return 2
    from torchplug._listing import check_one

    for report in matches:
        if report.status in ("ok", "unavailable", "shadowed"):
            check_one(report)
    data = {"entries": [_detail(r) for r in matches], "plugins": [r.as_dict(verbose=True) for r in records]}
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_detail(data)
    broken = any(r.status == "broken" for r in matches) or any(r.state == "broken" for r in records)
    return 1 if broken else 0


def _detail(report: EntryReport) -> dict[str, Any]:
    data = report.as_dict()
    cls = report.entry._cls
    doc = (cls.__doc__ or "").strip().splitlines() if cls is not None else []
    data["doc"] = doc[0] if doc else None
    return data


def _print_detail(data: dict[str, Any]) -> None:
    out = sys.stdout
    for entry in data["entries"]:
        provider = entry["provider"]
        out.write(f"{entry['kind']} {printable(repr(entry['name']))}\n")
        rows = [
            ("status", entry["status"] + (f" ({entry['reason']})" if entry["reason"] else "")),
            (
                "provider",
                f"{provider['distribution']} {provider['version']} (plugin {provider['plugin']!r})"
                if provider["distribution"]
                else f"module {provider['plugin']}",
            ),
            ("aliases", ", ".join(entry["aliases"]) or "-"),
            ("class", entry["target"]),
            ("init params", json.dumps(entry["init_params"]) if entry["init_params"] else "-"),
            ("description", entry["description"] or "-"),
            ("docstring", entry["doc"] or "-"),
        ]
        check = entry.get("check") or {}
        if check.get("device_count") is not None:
            rows.append(("devices", str(check["device_count"])))
        for label, value in rows:
            out.write(f"  {label:<12} {printable(value)}\n")
        out.write("\n")
    for record in data["plugins"]:
        origin = printable(f"{record['name']!r} from {record['distribution']} {record['version']}")
        out.write(f"plugin {origin}: {record['state']}\n")
        for label in ("module", "location", "requires_core", "reason", "load_ms"):
            out.write(f"  {label:<13} {printable(record[label])}\n")
        if record.get("traceback"):
            out.write(_traceback(record["traceback"], "    "))
        out.write("\n")


# -- the vendor kit: ``plugins verify`` and ``plugins new`` -------------------------------------------

VERIFY_EXIT_CODES: Final = """--json prints one object:
  kind, name, target, provider {plugin, distribution, version, builtin}, accelerator (what it trained on),
  conforms, counts {outcome: n}, seconds,
  checks: [{check, summary, outcome, seconds, message, fix, traceback}]
outcomes: passed, failed, skipped (with the reason), xfailed, xpassed

exit codes:
  0  the plugin conforms (skipped checks say why they could not run here)
  1  a check failed, or a known failure passed: the report gives the fix
  2  usage error: unknown or ambiguous name, unknown check, bad option"""


def add_vendor_kit_parsers(sub: Any) -> None:
    """Add ``plugins verify`` (the conformance suite) and ``plugins new`` (a package scaffold)."""
    from torchplug.cli._scaffold import add_parser as add_new_parser

    verify = sub.add_parser(
        "verify",
        help="run the conformance suite against an installed plugin",
        description="Run torchplug's conformance checks (torchplug.testing) against the plugin registered as "
        "NAME: one line per check with its result, time and detail, and the fix for each failure. Checks that "
        "train start the real Trainer (and, for two devices, real processes); checks that cannot run here are "
        "skipped with the reason.",
        epilog=VERIFY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("name", help="a registered name or alias, or NAME@PROVIDER")
    verify.add_argument("--kind", type=_kind, help="look among this kind only (when several kinds use NAME)")
    verify.add_argument("--json", action="store_true", help="print the report as one JSON document")
    verify.add_argument("--skip", action="append", default=[], metavar="CHECK", help="do not run CHECK (repeatable)")
    verify.add_argument(
        "--accelerator",
        help="for the other kinds: the accelerator to train on (a registered name; not for accelerators)",
    )
    verify.add_argument(
        "--setenv",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable to set during the checks (a scheduler's, for a cluster environment; repeatable)",
    )
    verify.add_argument(
        "--timeout", type=_seconds, default=300.0, help="seconds a process a check starts may run (> 0; default 300)"
    )
    verify.add_argument("-v", "--verbose", action="store_true", help="show the traceback of each failure")
    verify.set_defaults(handler=_verify)
    add_new_parser(sub)


def _seconds(value: str) -> float:
    """``--timeout``: a finite number of seconds above 0 (0 or less would fail every check that starts a process)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not valid: give a number of seconds above 0, such as 600")
    return seconds


def _accelerator_problem(args: argparse.Namespace, host: PluginHost) -> str | None:
    """Why ``--accelerator`` cannot serve the plugin verified: it is an accelerator itself, or the name is unknown.

    Raises:
        UsageError: The plugin to verify is not found as given (reported as such by the caller).
    """
    from torchplug._errors import PluginError, UnknownPluginError
    from torchplug.testing._context import Subject

    if args.accelerator is None:
        return None
    subject = Subject.find(args.name, args.kind, host=host)
    if subject.kind == "accelerator":
        return (
            f"--accelerator={args.accelerator!r} is not valid with accelerator {subject.entry.name!r}: an accelerator "
            "plugin trains on itself. Hint: leave --accelerator out; it picks what the other kinds train on."
        )
    try:
        try:
            host.registry("accelerator").resolve(args.accelerator)
        except UnknownPluginError as unknown:  # torch's current device type is served without a plugin
            from torchplug.accelerators.torch_device import resolve_device_type

            resolve_device_type(args.accelerator, unknown)
    except PluginError as exc:
        return f"--accelerator={args.accelerator!r} is not valid: {exc}"
    return None


def _verify(args: argparse.Namespace) -> int:
    from torchplug.testing._context import UsageError
    from torchplug.testing._report import format_result, name_width, table_header, verify

    variables = {}
    for item in args.setenv:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"core: error: --setenv {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        variables[key] = value
    out = sys.stdout
    width = 0

    def started(report: Any) -> None:
        nonlocal width
        width = name_width(report.subject.kind)
        if not args.json:
            out.write(f"{printable(report.header())}\n\n{table_header(width)}\n")

    def progress(result: Any) -> None:
        if not args.json:
            out.write(format_result(result, width, args.verbose) + "\n")
            out.flush()

    host = _host()
    try:
        problem = _accelerator_problem(args, host)
        if problem is not None:
            print(f"core: error: {printable(problem)}", file=sys.stderr)
            return 2
        report = verify(
            args.name,
            args.kind,
            skip=dict.fromkeys(args.skip, "skipped on request (--skip)"),
            host=host,
            accelerator=args.accelerator,
            variables=variables,
            timeout=args.timeout,
            started=started,
            progress=progress,
        )
    except UsageError as exc:
        print(f"core: error: {printable(exc)}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report.as_dict(), out, indent=2)
        out.write("\n")
    else:
        out.write(f"\n{printable(report.summary())}\n")
    return 0 if report.conforms else 1
