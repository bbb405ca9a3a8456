"""The lsf environment: jsrun ranks, and the compute hosts read lazily from the LSF rankfile."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from tests.environment_support import assert_no_method_writes_the_environment

from torchplug import MisconfigurationError
from torchplug.environments.lsf import LSFEnvironment

_PREFIXES = (
    "TORCHELASTIC_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "MV2_",
    "PALS_",
    "MPI_LOCAL",
    "LSB_",
    "JSM_",
    "SLURM_",
    "KUBERNETES_",
    "PET_",
    "TORCHPLUG_",
)
_NAMES = (
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)

#: The launch node first, then one line per slot of each compute host.
RANKFILE = "batch1\nnodeA\nnodeA\n\nnodeB\nnodeB\nnodeC\n"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable, so the tests do not depend on the machine they run on."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def rankfile(tmp_path: Path) -> Path:
    path = tmp_path / "rankfile"
    path.write_text(RANKFILE)
    return path


@pytest.fixture
def lsf_job(monkeypatch: pytest.MonkeyPatch, rankfile: Path) -> Path:
    """The variables of rank 3 of 6 (local rank 1), started by jsrun in LSF job 123456."""
    for name, value in {
        "LSB_JOBID": "123456",
        "LSB_DJOB_RANKFILE": str(rankfile),
        "JSM_NAMESPACE_SIZE": "6",
        "JSM_NAMESPACE_RANK": "3",
        "JSM_NAMESPACE_LOCAL_RANK": "1",
    }.items():
        monkeypatch.setenv(name, value)
    return rankfile


@pytest.mark.usefixtures("lsf_job")
def test_detected_in_an_lsf_job() -> None:
    assert LSFEnvironment.detect() is True
    assert LSFEnvironment.detect_reason() == "LSB_JOBID=123456, JSM_NAMESPACE_SIZE=6"


@pytest.mark.parametrize(
    "missing", ["LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE"]
)
@pytest.mark.usefixtures("lsf_job")
def test_not_detected_without(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.delenv(missing)
    assert LSFEnvironment.detect() is False
    assert missing in LSFEnvironment.detect_reason()


def test_not_detected_when_the_rankfile_does_not_exist(monkeypatch: pytest.MonkeyPatch, lsf_job: Path) -> None:
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(lsf_job.parent / "gone"))
    assert LSFEnvironment.detect() is False
    assert "is not a file" in LSFEnvironment.detect_reason()


@pytest.mark.usefixtures("lsf_job")
def test_detect_and_init_do_not_read_the_rankfile(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("the rankfile was read")

    monkeypatch.setattr("builtins.open", no_open)
    assert LSFEnvironment.detect() is True
    LSFEnvironment()


@pytest.mark.usefixtures("lsf_job")
def test_ranks_come_from_jsrun() -> None:
    env = LSFEnvironment()
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank()) == (6, 3, 1)
    env.set_world_size(1)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (6, 3)


@pytest.mark.usefixtures("lsf_job")
def test_main_address_is_the_first_compute_host() -> None:
    assert LSFEnvironment().main_address == "nodeA"


@pytest.mark.parametrize(
    ("hostname", "node_rank"),
    [
        pytest.param("nodeA", 0, id="first"),
        pytest.param("nodeB", 1, id="second"),
        pytest.param("nodeC", 2, id="third"),
        pytest.param("nodeB.cluster.example.org", 1, id="fully-qualified-hostname"),
    ],
)
@pytest.mark.usefixtures("lsf_job")
def test_node_rank_is_the_index_among_distinct_compute_hosts(
    monkeypatch: pytest.MonkeyPatch, hostname: str, node_rank: int
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    assert LSFEnvironment().node_rank() == node_rank


@pytest.mark.usefixtures("lsf_job")
def test_node_rank_of_an_unknown_host_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "batch1")
    with pytest.raises(RuntimeError, match="This host 'batch1' is not among the compute hosts") as info:
        LSFEnvironment().node_rank()
    assert "nodeA, nodeB, nodeC" in str(info.value)


def test_rankfile_with_only_the_launch_node(lsf_job: Path) -> None:
    lsf_job.write_text("batch1\n")
    with pytest.raises(RuntimeError, match="lists no compute host after the launch node"):
        _ = LSFEnvironment().main_address


def test_unreadable_rankfile(monkeypatch: pytest.MonkeyPatch, lsf_job: Path) -> None:
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(lsf_job.parent / "gone"))
    with pytest.raises(RuntimeError, match="Could not read the LSF rankfile LSB_DJOB_RANKFILE=") as info:
        _ = LSFEnvironment().main_address
    assert "jsrun" in str(info.value)


def test_rankfile_is_read_once(lsf_job: Path) -> None:
    env = LSFEnvironment()
    assert env.main_address == "nodeA"
    lsf_job.write_text("batch1\nnodeZ\n")
    assert env.main_address == "nodeA"


@pytest.mark.parametrize(
    ("extra", "port"),
    [
        pytest.param({"MASTER_PORT": "29500"}, 29500, id="master-port-wins"),
        pytest.param({}, 10000 + 123456 % 20000, id="from-job-id"),
        pytest.param({"LSB_JOBINDEX": "0"}, 10000 + 123456 % 20000, id="array-index-0"),
        pytest.param({"LSB_JOBINDEX": "3"}, 10000 + (123456 + 7919 * 3) % 20000, id="array-index-3"),
    ],
)
@pytest.mark.usefixtures("lsf_job")
def test_main_port(monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], port: int) -> None:
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    assert LSFEnvironment().main_port == port


@pytest.mark.usefixtures("lsf_job")
def test_derived_ports_stay_below_the_ephemeral_range_and_differ_for_neighbouring_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ports = set()
    for job_id in range(500_000, 520_000):
        monkeypatch.setenv("LSB_JOBID", str(job_id))
        ports.add(LSFEnvironment().main_port)
    assert len(ports) == 20_000
    assert min(ports) == 10_000 and max(ports) == 29_999


@pytest.mark.usefixtures("lsf_job")
def test_bad_job_id_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LSB_JOBID", "abc")
    with pytest.raises(RuntimeError, match="read LSB_JOBID='abc', which is not an integer"):
        _ = LSFEnvironment().main_port


@pytest.mark.usefixtures("lsf_job")
def test_validate_settings() -> None:
    env = LSFEnvironment()
    env.validate_settings(2, 3)
    with pytest.raises(MisconfigurationError) as info:
        env.validate_settings(4, 2)
    for part in [
        "You set `devices=4` and `num_nodes=2` (8 processes)",
        "JSM_NAMESPACE_SIZE=6",
        "Hint:",
        "devices × num_nodes = 6",
        "jsrun",
    ]:
        assert part in str(info.value)


@pytest.mark.usefixtures("lsf_job")
def test_no_method_writes_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "nodeB")
    assert_no_method_writes_the_environment(LSFEnvironment, 2, 3)
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ
