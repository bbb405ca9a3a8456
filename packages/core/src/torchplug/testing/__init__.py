"""torchplug's conformance suite: the checks every plugin of each kind must pass, and two ways to run them.

From the command line, against an installed plugin::

    core plugins verify NAME [--kind KIND] [--json] [--skip CHECK]

From a plugin package's own tests, by subclassing the suite of its kind (pytest)::

    from torchplug.testing import AcceleratorSuite

    class TestAcmeConformance(AcceleratorSuite):
        plugin = "acme"
        known_failures = {"ddp_fit": "collectives arrive in acme-runtime 2.0"}

Both run the same check functions (``check_names(kind)`` lists them). Importing this package
imports neither torch nor pytest; each name loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug.testing._check import (
        OUTCOMES,
        Check,
        CheckFailed,
        CheckResult,
        CheckSkipped,
        Outcome,
        checks_for,
        run_check,
    )
    from torchplug.testing._context import Context, Subject, UsageError
    from torchplug.testing._report import Report, check_names, verify
    from torchplug.testing.suites import (
        AcceleratorSuite,
        CheckpointIOSuite,
        ClusterEnvironmentSuite,
        LoggerSuite,
        PluginSuite,
        PrecisionSuite,
        StrategySuite,
    )

__all__ = [
    "OUTCOMES",
    "AcceleratorSuite",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "CheckpointIOSuite",
    "ClusterEnvironmentSuite",
    "Context",
    "LoggerSuite",
    "Outcome",
    "PluginSuite",
    "PrecisionSuite",
    "Report",
    "StrategySuite",
    "Subject",
    "UsageError",
    "check_names",
    "checks_for",
    "run_check",
    "verify",
]

_LAZY: Final = {
    **dict.fromkeys(
        ("OUTCOMES", "Check", "CheckFailed", "CheckResult", "CheckSkipped", "Outcome", "checks_for", "run_check"),
        "torchplug.testing._check",
    ),
    **dict.fromkeys(("Context", "Subject", "UsageError"), "torchplug.testing._context"),
    **dict.fromkeys(("Report", "check_names", "verify"), "torchplug.testing._report"),
    **dict.fromkeys(
        (
            "AcceleratorSuite",
            "CheckpointIOSuite",
            "ClusterEnvironmentSuite",
            "LoggerSuite",
            "PluginSuite",
            "PrecisionSuite",
            "StrategySuite",
        ),
        "torchplug.testing.suites",
    ),
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
