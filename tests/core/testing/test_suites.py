"""The pytest front end: a vendor's test class subclasses a suite; outcomes, known failures and the summary table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.core.testing.conftest import BROKEN_PLUGIN, child_env, skip_training

SLOW_SKIPS = skip_training("accelerator")

SUITES = f"""
from torchplug.testing import AcceleratorSuite, CheckpointIOSuite

SLOW = {SLOW_SKIPS!r}


class TestJunkDevices(AcceleratorSuite):
    plugin = "junk_devices"
    skipped_checks = SLOW
    known_failures = {{
        "parse_devices_junk": "accepts anything, on purpose",
        "parse_devices_bools": "accepts anything, on purpose",
        "parse_devices_duplicates": "accepts anything, on purpose",
        "parse_devices_too_many": "accepts anything, on purpose",
    }}


class TestCPUClaimsAFailure(AcceleratorSuite):
    plugin = "cpu"
    skipped_checks = SLOW
    known_failures = {{"parse_devices_junk": "claimed, but the CPU refuses junk"}}


class TestInPlace(CheckpointIOSuite):
    plugin = "in_place"
    skipped_checks = {{"fit": "slow", "describe": "slow", "checkpoint_resume": "slow"}}
"""


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(folder), str(folder), *args],
        env=child_env(TORCHPLUG_PLUGINS=BROKEN_PLUGIN, COLUMNS="400"),  # the short summary, unabridged
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_vendor_suite_reports_each_check_as_a_test(tmp_path: Path) -> None:
    (tmp_path / "test_vendor.py").write_text(SUITES)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["torchplug.testing.pytest_plugin"]\n')
    result = run_pytest(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out
    assert (
        "XFAIL test_vendor.py::TestJunkDevices::test_conformance[parse_devices_junk] - "
        "accepts anything, on purpose (fails with: parse_devices('abc') returned 1" in out
    )
    assert (
        "FAILED test_vendor.py::TestCPUClaimsAFailure::test_conformance[parse_devices_junk] - "
        "Failed: declared as a known failure (claimed, but the CPU refuses junk), but it passes" in out
    )
    assert (
        "FAILED test_vendor.py::TestInPlace::test_conformance[atomic_save] - "
        "Failed: a save that failed left a file under its final name 'new.ckpt'" in out
    )
    assert "fix: write to a temporary file beside the target" in out
    assert any(
        line.startswith("SKIPPED [") and line.endswith(": not what this test is about") for line in out.splitlines()
    )
    assert "PASSED test_vendor.py::TestJunkDevices::test_conformance[availability]" in out
    # the plugin's summary table: each check in order, with its result, time and detail
    table = out.split("torchplug conformance", 1)[1]
    assert "accelerator 'junk_devices' (TestJunkDevices)" in table
    rows = [
        line.split()[:2] for line in table.split("accelerator 'junk_devices' (TestJunkDevices)")[1].splitlines()[1:6]
    ]
    assert rows == [["registered", "passed"], ["listing_is_light", "passed"], ["availability", "passed"],
                    ["capabilities", "passed"], ["auto_device_count", "passed"]]  # fmt: skip
    assert "parse_devices_junk        expected failure" in table
    assert "parse_devices_junk        UNEXPECTED PASS" in table
    assert "atomic_save        FAILED" in table


def test_selecting_checks_by_name(tmp_path: Path) -> None:
    (tmp_path / "test_vendor.py").write_text(SUITES)
    result = run_pytest(tmp_path, "-k", "TestCPUClaimsAFailure and parse_devices_bools")
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout
    assert "torchplug conformance" not in result.stdout  # the summary plugin is opt-in


def test_an_unknown_check_in_known_failures_is_an_error_naming_the_choices(tmp_path: Path) -> None:
    (tmp_path / "test_vendor.py").write_text(
        textwrap.dedent("""
        from torchplug.testing import AcceleratorSuite

        class TestTypo(AcceleratorSuite):
            plugin = "cpu"
            known_failures = {"parse_device_junk": "typo"}
        """)
    )
    result = run_pytest(tmp_path)
    assert result.returncode == 2, result.stdout
    assert "TestTypo.known_failures names unknown check(s) 'parse_device_junk'. Checks of accelerator plugins:" in (
        result.stdout
    )


def test_a_suite_without_a_plugin_name_says_so(tmp_path: Path) -> None:
    (tmp_path / "test_vendor.py").write_text(
        "from torchplug.testing import StrategySuite\n\nclass TestNothing(StrategySuite):\n    pass\n"
    )
    result = run_pytest(tmp_path)
    assert result.returncode == 2, result.stdout
    assert "TestNothing must set plugin = '<registry name>' (the strategy to verify)" in result.stdout
