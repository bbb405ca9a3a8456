"""Each faulty plugin fails the check of the part of the contract it breaks; working plugins pass them all."""

from __future__ import annotations

import pytest

from tests.core.testing.conftest import BROKEN_PLUGIN, FAKE_VENDOR, HEAVY_SITE, skip_training
from torchplug._host import PluginHost
from torchplug.testing import OUTCOMES, checks_for, verify

#: name, kind, the checks it must fail, the training checks it needs to run.
FAULTS = [
    ("junk_devices", "accelerator", {"parse_devices_junk", "parse_devices_bools"}, ()),
    ("unquoted_devices", "accelerator", {"parse_devices_junk", "parse_devices_bools", "parse_devices_lists"}, ()),
    ("raising_availability", "accelerator", {"availability"}, ()),
    ("pickled_rng", "accelerator", {"rng_state"}, ()),
    ("flat_gather", "strategy", {"collectives"}, ("collectives",)),
    ("object_state", "precision", {"state_dict"}, ()),
    ("in_place", "checkpoint_io", {"atomic_save", "storage_options"}, ()),
    ("writing_env", "cluster_environment", {"detection"}, ()),
]


@pytest.mark.parametrize(("name", "kind", "failing", "keep"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_fails_its_check_with_the_fix(
    broken_host: PluginHost, name: str, kind: str, failing: set[str], keep: tuple[str, ...]
) -> None:
    report = verify(name, kind, host=broken_host, skip=skip_training(kind, keep))
    failed = {r.check.name: r for r in report.results if r.outcome == "failed"}
    assert failing <= set(failed), report.format()
    assert not report.conforms
    for result in failed.values():
        assert result.fix == result.check.fix and result.fix
        assert result.message


def test_junk_is_quoted_back_in_the_failure(broken_host: PluginHost) -> None:
    report = verify("junk_devices", host=broken_host, skip=skip_training("accelerator"))
    junk = next(r for r in report.results if r.check.name == "parse_devices_junk")
    assert junk.message == "parse_devices('abc') returned 1; it is not a number of devices or a list of ids"


def test_the_core_cpu_accelerator_conforms_without_its_slow_checks(broken_host: PluginHost) -> None:
    report = verify("cpu", host=broken_host, skip={"ddp_fit": "slow", "collectives": "slow"})
    assert report.conforms, report.format()
    assert {r.outcome for r in report.results} == {"passed", "skipped"}


@pytest.mark.slow
def test_the_core_cpu_accelerator_conforms_with_two_processes(broken_host: PluginHost) -> None:
    report = verify("cpu", host=broken_host)
    assert report.conforms, report.format()
    assert {r.outcome for r in report.results} == {"passed"}, report.format()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("single_device", "strategy"),
        ("bf16-mixed", "precision"),
        ("torch", "checkpoint_io"),
        ("dcp", "checkpoint_io"),
        ("dcp_async", "checkpoint_io"),
        ("local", "cluster_environment"),
    ],
)
def test_the_core_plugins_of_each_kind_conform(broken_host: PluginHost, name: str, kind: str) -> None:
    report = verify(name, kind, host=broken_host)
    assert report.conforms, report.format()


def test_a_known_failure_is_an_expected_failure_and_keeps_conformance(broken_host: PluginHost) -> None:
    report = verify(
        "pickled_rng",
        host=broken_host,
        skip=skip_training("accelerator"),
        known_failures={"rng_state": "the generator is a Python object for now"},
    )
    rng = next(r for r in report.results if r.check.name == "rng_state")
    assert rng.outcome == "xfailed"
    assert rng.message.startswith("the generator is a Python object for now (fails with: ")
    assert report.conforms, report.format()


def test_a_known_failure_that_passes_is_reported_and_breaks_conformance(broken_host: PluginHost) -> None:
    report = verify(
        "cpu", host=broken_host, skip=skip_training("accelerator"), known_failures={"parse_devices_junk": "claimed"}
    )
    junk = next(r for r in report.results if r.check.name == "parse_devices_junk")
    assert junk.outcome == "xpassed"
    assert junk.fix == "remove 'parse_devices_junk' from the known failures: it passes now"
    assert not report.conforms
    assert "1 unexpected pass" in report.summary()


def test_listing_that_imports_torch_and_a_vendor_library_fails(
    new_host: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FAKE_VENDOR))
    monkeypatch.syspath_prepend(str(HEAVY_SITE))
    host = new_host(autoload=False, requested=("tests.core.testing.heavy_plugin",))  # type: ignore[operator]
    report = verify("heavy", host=host, skip=skip_training("accelerator"))
    listing = next(r for r in report.results if r.check.name == "listing_is_light")
    assert listing.outcome == "failed"
    assert "torch was imported" in listing.message
    assert "these libraries were imported: acme_vendorlib" in listing.message


def test_listing_check_skips_a_name_registered_at_run_time(broken_host: PluginHost) -> None:
    broken_host.registry("accelerator").register(
        "at_runtime", "torchplug.accelerators.cpu:CPUAccelerator", description="registered by a test"
    )
    report = verify("at_runtime", host=broken_host, skip=skip_training("accelerator"))
    listing = next(r for r in report.results if r.check.name == "listing_is_light")
    assert (listing.outcome, listing.message) == (
        "skipped",
        "registered at run time by user code, not by a plugin module: there is nothing to list",
    )


def test_every_kind_has_named_checks_with_a_summary_and_a_fix() -> None:
    for kind in ("accelerator", "strategy", "precision", "checkpoint_io", "cluster_environment"):
        checks = checks_for(kind)
        names = [c.name for c in checks]
        assert len(names) == len(set(names))
        assert {"registered", "listing_is_light", "describe", "fit", "checkpoint_resume"} <= set(names)
        assert all(c.summary and c.fix for c in checks)
    assert set(OUTCOMES) == {"passed", "failed", "skipped", "xfailed", "xpassed"}


def test_unknown_check_names_are_refused_with_the_choices(broken_host: PluginHost) -> None:
    from torchplug.testing import UsageError

    with pytest.raises(UsageError, match=r"skip names unknown check\(s\) 'parse_device' for accelerator plugins"):
        verify("cpu", host=broken_host, skip={"parse_device": "typo"})
    with pytest.raises(UsageError, match=r"known_failures names unknown check\(s\) 'nope'"):
        verify("cpu", host=broken_host, known_failures={"nope": "typo"})


def test_names_are_found_by_kind_and_ambiguity_is_refused(broken_host: PluginHost) -> None:
    from torchplug.testing import UsageError

    broken_host.registry("precision").register("cpu", "torchplug.precision.precision:Precision", description="x")
    with pytest.raises(UsageError, match=r"'cpu' is registered as several kinds: accelerator, precision"):
        verify("cpu", host=broken_host)
    with pytest.raises(UsageError, match=r"no plugin is registered as 'nope'\. Installed: .*Hint: core plugins list"):
        verify("nope", host=broken_host)


def test_verifying_imports_nothing_heavy_until_a_check_runs() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torchplug.testing; torchplug.testing.check_names('accelerator'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pytest'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_broken_plugin_module_is_named_as_the_listing_expects() -> None:
    assert BROKEN_PLUGIN == "tests.core.testing.broken_plugin"
