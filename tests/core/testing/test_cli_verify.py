"""``core plugins verify NAME``: the report, its exit codes (0 conforms, 1 not, 2 usage) and its JSON form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.testing.conftest import BROKEN_PLUGIN, REPO_ROOT, TWIN_SITE, child_env, skip_training


def core(*args: str, plugins: str = BROKEN_PLUGIN, sites: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchplug", *args],
        env=child_env(*sites, TORCHPLUG_PLUGINS=plugins),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def skips(kind: str) -> list[str]:
    return [arg for name in skip_training(kind) for arg in ("--skip", name)]


def test_a_broken_plugin_exits_1_naming_the_check_and_its_fix() -> None:
    result = core("plugins", "verify", "junk_devices", *skips("accelerator"))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert (
        lines[0] == "accelerator 'junk_devices' (tests.core.testing.broken:JunkAcceptingAccelerator) from "
        "torchplug-test-broken 1.0"  # the distribution installed around BROKEN_PLUGIN (see conftest)
    )
    failed = [line for line in lines if "FAILED" in line]
    assert [line.split()[0] for line in failed] == [
        "parse_devices_duplicates",
        "parse_devices_too_many",
        "parse_devices_bools",
        "parse_devices_junk",
    ]
    junk = lines.index(next(line for line in failed if line.startswith("parse_devices_junk")))
    assert "parse_devices('abc') returned 1" in lines[junk]
    assert lines[junk + 1].strip().startswith("fix: refuse values you do not accept with ValueError or TypeError")
    assert "skipped on request (--skip)" in result.stdout
    assert lines[-1].startswith("11 passed, 4 failed, 12 skipped in ")
    assert lines[-1].endswith("s: accelerator 'junk_devices' does not conform")


def test_a_conforming_plugin_exits_0_with_every_check_timed() -> None:
    result = core("plugins", "verify", "torch", "--kind", "io")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines()[3:] if line and not line.startswith(" ")][:-1]
    assert [row.split()[0] for row in rows] == [
        "registered",
        "listing_is_light",
        "save_load",
        "fsspec_url",
        "missing_file",
        "remove",
        "atomic_save",
        "storage_options",
        "flush_teardown",
        "describe",
        "fit",
        "checkpoint_resume",
    ]
    assert all(row.split()[1] == "passed" and row.split()[2].endswith("s") for row in rows)
    assert "trained on accelerator 'cpu'" in result.stdout.splitlines()[0]


def test_json_report() -> None:
    result = core("plugins", "verify", "in_place", "--json", *skips("checkpoint_io"))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert (report["kind"], report["name"], report["conforms"]) == ("checkpoint_io", "in_place", False)
    assert report["provider"]["plugin"] == BROKEN_PLUGIN
    assert report["counts"] == {"passed": 7, "failed": 2, "skipped": 3}
    atomic = next(c for c in report["checks"] if c["check"] == "atomic_save")
    assert atomic["outcome"] == "failed"
    assert atomic["fix"].startswith("write to a temporary file beside the target")
    assert atomic["message"] == "a save that failed left a file under its final name 'new.ckpt'"
    assert set(atomic) == {"check", "summary", "outcome", "seconds", "message", "fix", "traceback"}


def test_setenv_declares_a_scheduler_job() -> None:
    result = core(
        "plugins", "verify", "torchelastic", "--setenv", "TORCHELASTIC_RUN_ID=7", "--setenv", "WORLD_SIZE=1",
        "--setenv", "RANK=0", "--setenv", "LOCAL_RANK=0", "--setenv", "GROUP_RANK=0", "--setenv", "LOCAL_WORLD_SIZE=1",
        "--setenv", "MASTER_ADDR=127.0.0.1", "--setenv", "MASTER_PORT=29511",
        "--skip", "fit", "--skip", "checkpoint_resume",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ranks              passed" in result.stdout
    assert "rank 0 of 1 (local 0, node 0), rendezvous 127.0.0.1:29511" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "core: error: no plugin is registered as 'nope'. Installed: "),
        (["cpu", "--skip", "parse_device"], "core: error: skip names unknown check(s) 'parse_device' for accelerator"),
        (["cpu", "--setenv", "NOVALUE"], "core: error: --setenv 'NOVALUE' is not KEY=VALUE"),
        (["cpu", "--kind", "gadget"], "argument --kind: unknown kind 'gadget'"),
        (
            ["cpu", "--accelerator", "torch"],
            "core: error: --accelerator='torch' is not valid with accelerator 'cpu': an accelerator plugin trains on "
            "itself. Hint: leave --accelerator out",
        ),
        (
            ["torch", "--kind", "io", "--accelerator", "cpuu"],
            "core: error: --accelerator='cpuu' is not valid: Unknown accelerator 'cpuu'. Did you mean 'cpu'?",
        ),
        (["cpu", "--timeout", "0"], "argument --timeout: '0' is not valid: give a number of seconds above 0"),
        (["cpu", "--timeout", "-5"], "argument --timeout: '-5' is not valid: give a number of seconds above 0"),
        (["cpu", "--timeout", "nan"], "argument --timeout: 'nan' is not valid: give a number of seconds above 0"),
    ],
    ids=[
        "unknown-name",
        "unknown-check",
        "bad-setenv",
        "bad-kind",
        "accelerator-for-an-accelerator",
        "unknown-accelerator",
        "zero-timeout",
        "negative-timeout",
        "nan-timeout",
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = core("plugins", "verify", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_name_of_several_kinds_asks_for_kind() -> None:
    result = core(
        "plugins", "verify", "in_place", plugins=f"{BROKEN_PLUGIN},tests.core.testing.twin_plugin", sites=(TWIN_SITE,)
    )
    assert result.returncode == 2
    assert "'in_place' is registered as several kinds: accelerator, checkpoint_io. Hint: add --kind accelerator" in (
        result.stderr
    )


@pytest.mark.slow
def test_the_report_is_not_interleaved_with_the_trainers_lines() -> None:
    result = core("plugins", "verify", "csv")  # its fit check builds a Trainer and fits a few steps
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Trainer:" not in result.stderr + result.stdout
    assert "Warning" not in result.stderr + result.stdout
    assert result.stdout.splitlines()[-1].startswith("5 passed in ")
