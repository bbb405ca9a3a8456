"""Fixtures for env-slurm: a clean environment for every test, and a real loopback SLURM cluster for the slurm tests.

The cluster fixture installs nothing. Without the SLURM binaries (or without root) the ``slurm``
tests are skipped with the reason, unless ``TORCHPLUG_REQUIRE_SLURM=1`` (CI) turns the skip into
a failure. The daemon logs are attached to the report of every failed ``slurm`` test.
"""

from __future__ import annotations

import os
import shutil
import stat
import textwrap
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.env_slurm import cluster as slurm_cluster

_PREFIXES = ("SLURM_", "SLURMD_", "TORCHPLUG_SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "LSB_", "JSM_")
_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "TORCHPLUG_CLUSTER_ENVIRONMENT",
    "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS",
)
REQUIRE_VAR = "TORCHPLUG_REQUIRE_SLURM"

_running: list[slurm_cluster.Cluster] = []


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every scheduler and launcher variable, so no test depends on where it runs."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real executable named ``scontrol``, first on PATH, that records its arguments and exits with $FAKE_EXIT.

    Returns the file it appends its arguments to (one line per call, arguments separated by tabs).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "scontrol-calls.txt"
    script = bin_dir / "scontrol"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        (IFS="$(printf '\\t')"; printf '%s\\n' "$*") >> {record}
        if [ -n "$FAKE_OUTPUT" ]; then echo "$FAKE_OUTPUT" >&2; fi
        exit "${{FAKE_EXIT:-0}}"
        """)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return record


def calls(record: Path) -> list[list[str]]:
    """The calls a :func:`fake_scontrol` recorded."""
    return [line.split("\t") for line in record.read_text().splitlines()] if record.exists() else []


@pytest.fixture(scope="session")
def slurm() -> Iterator[slurm_cluster.Cluster]:
    """A running single-node SLURM cluster on loopback, stopped (by PID) and checked at the end of the session."""
    reason = slurm_cluster.missing_requirements()
    if reason is not None:
        if os.environ.get(REQUIRE_VAR) == "1":
            pytest.fail(f"{REQUIRE_VAR}=1, but {reason}", pytrace=False)
        pytest.skip(reason)
    cluster = slurm_cluster.start()
    _running.append(cluster)
    try:
        yield cluster
    finally:
        _running.remove(cluster)
        problems = cluster.stop()
    assert not problems, f"the SLURM cluster did not stop cleanly: {problems}\n{cluster.logs()}"
    shutil.rmtree(cluster.base, ignore_errors=True)  # kept when the stop was not clean, for its logs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and _running and item.get_closest_marker("slurm") is not None:
        report.sections.append(("SLURM daemon logs", _running[-1].logs()))
