"""A pytest plugin for plugin packages that run the conformance suite: a table of every check at the end.

Enable it in your ``conftest.py`` (it is never loaded into other pytest runs by itself)::

    pytest_plugins = ["torchplug.testing.pytest_plugin"]

The suites (:mod:`torchplug.testing.suites`) work without it; with it, the end of the run shows,
for every plugin verified, each check with its result, time and detail (the reason of a skip, of
an expected failure) as ``core plugins verify`` prints them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from torchplug.testing.suites import RESULT_PROPERTY

__all__ = ["pytest_report_header", "pytest_terminal_summary"]

_LABELS = {
    "passed": "passed",
    "failed": "FAILED",
    "skipped": "skipped",
    "xfailed": "expected failure",
    "xpassed": "UNEXPECTED PASS",
}


def pytest_report_header(config: pytest.Config) -> str:
    """Name the core whose conformance suite runs."""
    from torchplug._discovery import core_version

    return f"torchplug conformance suite: core {core_version()}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print each verified plugin's checks: check, result, time, detail."""
    by_plugin: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for key, value in getattr(report, "user_properties", ()):
                if key == RESULT_PROPERTY:
                    by_plugin[(value["kind"], value["plugin"], report.nodeid.split("::")[-2])].append(value)
    if not by_plugin:
        return
    terminalreporter.section("torchplug conformance")
    for (kind, plugin, suite), results in sorted(by_plugin.items()):
        width = max(len(r["check"]) for r in results)
        terminalreporter.write_line(f"{kind} {plugin!r} ({suite})")
        for result in sorted(results, key=lambda r: r.get("order", 0)):
            message = (result["message"] or "").splitlines()
            line = f"  {result['check']:<{width}}  {_LABELS[result['outcome']]:<16}  {result['seconds']:>6.2f}s"
            terminalreporter.write_line(f"{line}  {message[0] if message else ''}"[:240])
