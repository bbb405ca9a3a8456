"""The processes conformance checks start: ``python -m torchplug.testing._worker listing|fit ...``.

``listing`` lists the plugins as ``core plugins list`` does, in a fresh interpreter, and prints as
JSON which modules that imported. ``fit`` trains the conformance model with the Trainer arguments
of a spec file; a launching strategy re-runs this same command line for its other ranks, and
every rank writes ``rank-<global rank>.json`` beside the spec.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from pathlib import Path
from typing import Any

_STARTUP = frozenset(sys.modules)


def listing(kind: str, name: str, plugin: str, target: str) -> dict[str, Any]:
    """List the plugins with only ``plugin`` loaded (the core alone when empty); report what was imported."""
    from torchplug._host import PluginHost
    from torchplug._listing import collect
    from torchplug._settings import PluginSettings
    from torchplug.testing._checks_common import LISTING_ALLOWED

    start = time.perf_counter()
    core = PluginHost(PluginSettings(autoload=False))
    collect(core)
    baseline = frozenset(sys.modules) if plugin else _STARTUP
    host = PluginHost(PluginSettings(autoload=False, requested=(plugin,))) if plugin else core
    result = collect(host)
    seconds = time.perf_counter() - start
    new = {m.partition(".")[0] for m in set(sys.modules) - baseline}
    own = _own_packages(host, plugin, target)
    foreign = sorted(
        m
        for m in new
        if m not in sys.stdlib_module_names and m not in LISTING_ALLOWED and m not in own and m != "torch"
    )
    torch = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))[:3]
    report = next(
        (r for r in result.entries if r.entry.kind == kind and r.entry.name == name and r.entry.target_path == target),
        None,
    )
    return {
        "torch": torch,
        "foreign": foreign,
        "status": report.status if report else None,
        "reason": report.reason if report else "not listed",
        "seconds": seconds,
    }


def _own_packages(host: Any, plugin: str, target: str) -> set[str]:
    """The top-level packages of the plugin: its module's, its target's, and its distribution's."""
    own = {"torchplug", target.partition(":")[0].partition(".")[0]}
    for record in host.records:
        if plugin and plugin in (record.name, record.distribution, record.value):
            own.add(record.value.partition(":")[0].partition(".")[0])
            if record.distribution:
                own.update(_distribution_packages(record.distribution))
    return own


def _distribution_packages(distribution: str) -> set[str]:
    mapping = importlib.metadata.packages_distributions()
    return {top for top, dists in mapping.items() if distribution in dists}


def fit(spec_path: Path) -> None:
    """Run the fit a spec describes; each process that trains writes its record beside the spec."""
    from torchplug.testing._training import run_fit

    spec = json.loads(spec_path.read_text())
    root = spec_path.parent
    run_fit(
        root,
        crash_at=spec.get("crash_at"),
        ckpt_path=spec.get("ckpt_path"),
        collectives=bool(spec.get("collectives")),
        record_dir=root,
        **dict(spec["arguments"]),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process."""
    parser = argparse.ArgumentParser(prog="python -m torchplug.testing._worker")
    sub = parser.add_subparsers(dest="mode", required=True)
    show = sub.add_parser("listing")
    for option in ("--kind", "--name", "--plugin", "--target"):
        show.add_argument(option, required=True)
    run = sub.add_parser("fit")
    run.add_argument("--spec", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.mode == "listing":
        print(json.dumps(listing(args.kind, args.name, args.plugin, args.target)))
    else:
        fit(args.spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
