"""The conformance suite as pytest test classes: subclass the one of your plugin's kind in your own tests.

Example (``tests/test_conformance.py`` of a plugin package)::

    import pytest
    from torchplug.testing import AcceleratorSuite

    class TestAcmeConformance(AcceleratorSuite):
        plugin = "acme"                              # the registry name to verify
        known_failures = {"ddp_fit": "collectives arrive in acme-runtime 2.0"}
        skipped_checks = {"rng_state": "the simulator has no generator"}

        @pytest.fixture
        def plugin_setup(self, monkeypatch):         # optional: put a fake vendor library in place
            monkeypatch.syspath_prepend("tests/fake_vendor")

Each check is one test, ``test_conformance[CHECK]`` (``pytest -k parse_devices`` selects some).
A known failure that fails is reported as xfailed with its reason; one that passes fails the
test, so the list stays true. A check that cannot run here (no device, no vendor library) is
skipped with the reason. Add ``pytest_plugins = ["torchplug.testing.pytest_plugin"]`` to your
``conftest.py`` for a summary table of the checks at the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from torchplug.testing._check import Check, CheckResult, checks_for, run_check
from torchplug.testing._context import Context, Subject

__all__ = [
    "AcceleratorSuite",
    "CheckpointIOSuite",
    "ClusterEnvironmentSuite",
    "LoggerSuite",
    "PluginSuite",
    "PrecisionSuite",
    "StrategySuite",
]

#: The key under which each test records its check result (read by ``torchplug.testing.pytest_plugin``).
RESULT_PROPERTY = "torchplug_conformance"


class PluginSuite:
    """The checks of one plugin kind as tests; subclass one of the six kind suites, not this class.

    Attributes:
        kind: The plugin kind (set by each kind's suite).
        plugin: The registry name (or ``name@provider``) of the plugin to verify. Required.
        known_failures: Check name to the reason it is known to fail. A failing one is xfailed; a
            passing one fails the test, asking to remove it.
        skipped_checks: Check name to the reason it must not run here (reported as skipped).
        accelerator: The accelerator the checks of the other kinds train on (default: the installed
            one that names the plugin, else ``"cpu"``).
        environment_variables: For a cluster environment, the variables its scheduler sets for a
            one-process job, set during every check.
        timeout: Seconds a process started by a check may run.
    """

    kind: ClassVar[str] = ""
    plugin: ClassVar[str] = ""
    # Read-only views: a subclass sets its own mapping; none can change the one every suite shares.
    known_failures: ClassVar[Mapping[str, str]] = MappingProxyType({})
    skipped_checks: ClassVar[Mapping[str, str]] = MappingProxyType({})
    accelerator: ClassVar[str | None] = None
    environment_variables: ClassVar[Mapping[str, str]] = MappingProxyType({})
    timeout: ClassVar[float] = 300.0

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One test per check of the suite's kind, with the check's name as its id."""
        if "conformance_check" in metafunc.fixturenames:
            checks = checks_for(self.kind)
            _validate(type(self), [c.name for c in checks])
            metafunc.parametrize("conformance_check", checks, ids=[c.name for c in checks])

    @pytest.fixture
    def plugin_setup(self) -> Iterator[None] | None:
        """Override to prepare what the checks need (a fake vendor library on ``sys.path``...) before each check.

        A plain fixture or a generator (with teardown after ``yield``); it may request other fixtures.
        """
        return None

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_cache(cls) -> dict[str, Any]:
        """Results shared by the checks of one class (a two-process fit runs once for several checks)."""
        return {}

    @pytest.fixture
    def conformance_context(self, plugin_setup: None, conformance_cache: dict[str, Any]) -> Context:
        """The plugin under test, found in this process's registries once ``plugin_setup`` ran."""
        subject = Subject.find(
            self.plugin, self.kind, accelerator=self.accelerator, variables=dict(self.environment_variables)
        )
        return Context(subject, conformance_cache, self.timeout)

    def test_conformance(self, conformance_check: Check, conformance_context: Context, record_property: Any) -> None:
        """Run one check; skip, xfail or fail the test as its outcome says."""
        if conformance_check.name in self.skipped_checks:
            result = CheckResult(conformance_check, "skipped", 0.0, self.skipped_checks[conformance_check.name])
        else:
            known = self.known_failures.get(conformance_check.name)
            result = run_check(conformance_check, conformance_context, known)
        order = [c.name for c in checks_for(self.kind)].index(conformance_check.name)
        record_property(RESULT_PROPERTY, {"plugin": self.plugin, "kind": self.kind, "order": order, **result.as_dict()})
        _report(result)


def _report(result: CheckResult) -> None:
    if result.outcome == "skipped":
        pytest.skip(result.message)
    if result.outcome == "xfailed":
        pytest.xfail(result.message)
    if result.outcome in ("failed", "xpassed"):
        text = result.message + (f"\nfix: {result.fix}" if result.fix else "")
        if result.traceback:
            text += f"\n\n{result.traceback}"
        pytest.fail(text, pytrace=False)


def _validate(suite: type[PluginSuite], names: list[str]) -> None:
    if not suite.plugin:
        raise TypeError(f"{suite.__name__} must set plugin = '<registry name>' (the {suite.kind} to verify)")
    for attribute in ("known_failures", "skipped_checks"):
        unknown = sorted(set(getattr(suite, attribute)) - set(names))
        if unknown:
            raise ValueError(
                f"{suite.__name__}.{attribute} names unknown check(s) {', '.join(map(repr, unknown))}. "
                f"Checks of {suite.kind} plugins: {', '.join(names)}"
            )


class AcceleratorSuite(PluginSuite):
    """The conformance checks of an Accelerator (``core plugins verify NAME --kind accelerator``)."""

    kind: ClassVar[str] = "accelerator"


class StrategySuite(PluginSuite):
    """The conformance checks of a Strategy, trained on :attr:`accelerator` (default: the one that names it)."""

    kind: ClassVar[str] = "strategy"


class PrecisionSuite(PluginSuite):
    """The conformance checks of a Precision, trained on :attr:`accelerator` (default: one that declares it)."""

    kind: ClassVar[str] = "precision"


class CheckpointIOSuite(PluginSuite):
    """The conformance checks of a CheckpointIO."""

    kind: ClassVar[str] = "checkpoint_io"


class ClusterEnvironmentSuite(PluginSuite):
    """The conformance checks of a ClusterEnvironment, under :attr:`environment_variables`."""

    kind: ClassVar[str] = "cluster_environment"


class LoggerSuite(PluginSuite):
    """The conformance checks of a Logger: its API called as the Trainer calls it, a fit with ``logger=NAME``."""

    kind: ClassVar[str] = "logger"
