"""The mpi environment: ranks from the launcher's variables; mpi4py only for a missing rendezvous."""

from __future__ import annotations

import os
import socket
import sys
import types

import pytest
from tests.environment_support import assert_no_method_writes_the_environment, set_env

from torchplug import MisconfigurationError
from torchplug.environments.mpi import MPIEnvironment

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

#: Rank 6 of 8, local rank 2 of 4 (so on node 1), as each launcher says it.
OPEN_MPI = {
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_RANK": "6",
    "OMPI_COMM_WORLD_LOCAL_RANK": "2",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "2",
}
MVAPICH2 = {
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_RANK": "6",
    "MV2_COMM_WORLD_LOCAL_RANK": "2",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
}
HYDRA = {"PMI_SIZE": "8", "PMI_RANK": "6", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"}
CRAY_PALS = {"PMI_SIZE": "8", "PMI_RANK": "6", "PMI_LOCAL_RANK": "2", "PMI_LOCAL_SIZE": "4", "PALS_NODEID": "1"}
LAUNCHERS = [
    pytest.param(OPEN_MPI, "Open MPI", id="open-mpi"),
    pytest.param(MVAPICH2, "MVAPICH2", id="mvapich2"),
    pytest.param(HYDRA, "MPICH or Intel MPI (Hydra)", id="mpich-intel-hydra"),
    pytest.param(CRAY_PALS, "Cray MPICH (PALS)", id="cray-pals"),
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable, and make any import of mpi4py fail unless a test fakes it."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)
    monkeypatch.setitem(sys.modules, "mpi4py", None)


class FakeComm:
    """MPI.COMM_WORLD as seen by one rank: ``bcast`` returns what rank 0 would have sent."""

    def __init__(self, rank: int, from_root: object) -> None:
        self.rank = rank
        self.from_root = from_root
        self.sent: list[object] = []

    def Get_rank(self) -> int:
        return self.rank

    def bcast(self, obj: object, root: int = 0) -> object:
        assert root == 0
        self.sent.append(obj)
        return obj if self.rank == 0 else self.from_root


def fake_mpi4py(monkeypatch: pytest.MonkeyPatch, comm: FakeComm) -> None:
    module = types.ModuleType("mpi4py")
    module.MPI = types.SimpleNamespace(COMM_WORLD=comm)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mpi4py", module)


@pytest.mark.parametrize(("env", "name"), LAUNCHERS)
def test_detected_under_each_launcher(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str) -> None:
    set_env(monkeypatch, env)
    assert MPIEnvironment.detect() is True
    assert MPIEnvironment.detect_reason().startswith(name)


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        pytest.param({}, "no MPI launcher variables", id="plain-machine"),
        pytest.param({**OPEN_MPI, "OMPI_COMM_WORLD_SIZE": "1"}, "a single process", id="single-process"),
        pytest.param({**HYDRA, "PMI_SIZE": "many"}, "is not a number", id="size-not-a-number"),
        pytest.param({"PMI_SIZE": "4", "PMI_RANK": "1"}, "no MPI launcher variables", id="pmi-without-local-rank"),
        pytest.param({"PMIX_RANK": "1"}, "no MPI launcher variables", id="pmix-alone"),
    ],
)
def test_not_detected(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], reason: str) -> None:
    set_env(monkeypatch, env)
    assert MPIEnvironment.detect() is False
    assert reason in MPIEnvironment.detect_reason()


@pytest.mark.parametrize(("env", "name"), LAUNCHERS)
def test_ranks_from_each_launcher(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str) -> None:
    set_env(monkeypatch, env)
    mpi = MPIEnvironment()
    assert mpi.creates_processes_externally is True
    assert (mpi.world_size(), mpi.global_rank(), mpi.local_rank(), mpi.node_rank()) == (8, 6, 2, 1)
    assert mpi.processes_per_node() == 4
    mpi.set_world_size(1)
    mpi.set_global_rank(0)
    assert (mpi.world_size(), mpi.global_rank()) == (8, 6)


def test_open_mpi_node_rank_variable_is_not_taken_for_the_node_index(monkeypatch: pytest.MonkeyPatch) -> None:
    # OMPI_COMM_WORLD_NODE_RANK is the rank on the node across all jobs, not the node's index.
    set_env(monkeypatch, {**OPEN_MPI, "OMPI_COMM_WORLD_NODE_RANK": "7"})
    assert MPIEnvironment().node_rank() == 1


def test_pals_node_id_wins_over_the_computed_node_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**CRAY_PALS, "PALS_NODEID": "5"})
    assert MPIEnvironment().node_rank() == 5


def test_round_robin_placement_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    # --map-by node on 2 nodes: rank 1 is the first process of the second node.
    set_env(
        monkeypatch,
        {
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        },
    )
    with pytest.raises(RuntimeError, match="did not place consecutive ranks on the same node") as info:
        MPIEnvironment().node_rank()
    assert "--map-by slot" in str(info.value)


def test_node_rank_without_local_size_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {k: v for k, v in OPEN_MPI.items() if k != "OMPI_COMM_WORLD_LOCAL_SIZE"})
    mpi = MPIEnvironment()
    assert mpi.processes_per_node() is None
    with pytest.raises(RuntimeError, match="Open MPI did not set OMPI_COMM_WORLD_LOCAL_SIZE"):
        mpi.node_rank()


def test_chosen_without_any_launcher_says_what_is_supported() -> None:
    with pytest.raises(RuntimeError, match="found no MPI launcher's rank variables") as info:
        MPIEnvironment().world_size()
    assert "OMPI_COMM_WORLD_SIZE" in str(info.value) and "mpirun" in str(info.value)


def test_rendezvous_from_master_variables_needs_no_mpi4py(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**OPEN_MPI, "MASTER_ADDR": "node0", "MASTER_PORT": "29500"})
    mpi = MPIEnvironment()
    assert (mpi.main_address, mpi.main_port) == ("node0", 29500)


@pytest.mark.parametrize("attribute", ["main_address", "main_port"])
def test_rendezvous_without_master_variables_or_mpi4py(monkeypatch: pytest.MonkeyPatch, attribute: str) -> None:
    set_env(monkeypatch, OPEN_MPI)
    with pytest.raises(ImportError, match="pip install mpi4py") as info:
        getattr(MPIEnvironment(), attribute)
    assert "MASTER_ADDR and MASTER_PORT are not set" in str(info.value)
    assert "mpirun -x MASTER_ADDR" in str(info.value)


def test_rank_0_broadcasts_its_hostname_and_a_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**OPEN_MPI, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    monkeypatch.setattr(socket, "gethostname", lambda: "node0")
    comm = FakeComm(rank=0, from_root=None)
    fake_mpi4py(monkeypatch, comm)
    mpi = MPIEnvironment()
    assert mpi.main_address == "node0"
    port = mpi.main_port
    assert 0 < port < 65536
    assert comm.sent == ["node0", port]
    assert (mpi.main_address, mpi.main_port) == ("node0", port)
    assert len(comm.sent) == 2, "each collective runs once per process"


def test_other_ranks_receive_rank_0s_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, OPEN_MPI)
    comm = FakeComm(rank=6, from_root="node0")
    fake_mpi4py(monkeypatch, comm)
    assert MPIEnvironment().main_address == "node0"
    comm.from_root = 40000
    assert MPIEnvironment().main_port == 40000
    assert comm.sent == [None, None]


def test_validate_settings_accepts_matching_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, OPEN_MPI)
    MPIEnvironment().validate_settings(4, 2)


@pytest.mark.parametrize(
    ("env", "devices", "num_nodes", "parts"),
    [
        pytest.param(
            OPEN_MPI,
            2,
            4,
            [
                "You set `devices=2`",
                "Open MPI started 4 processes on this node",
                "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                "Hint: set `devices=4`",
                "--npernode",
            ],
            id="devices-vs-processes-on-node",
        ),
        pytest.param(
            HYDRA,
            4,
            1,
            [
                "You set `devices=4` and `num_nodes=1` (4 processes)",
                "PMI_SIZE=8",
                "Hint:",
                "devices × num_nodes = 8",
                "mpirun -np 4",
                "-ppn",
            ],
            id="total-vs-world-size",
        ),
    ],
)
def test_validate_settings_errors(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], devices: int, num_nodes: int, parts: list[str]
) -> None:
    set_env(monkeypatch, env)
    with pytest.raises(MisconfigurationError) as info:
        MPIEnvironment().validate_settings(devices, num_nodes)
    for part in parts:
        assert part in str(info.value)


def test_detect_never_imports_mpi4py(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, OPEN_MPI)
    monkeypatch.delitem(sys.modules, "mpi4py")
    MPIEnvironment.detect()
    MPIEnvironment.detect_reason()
    mpi = MPIEnvironment()
    mpi.world_size(), mpi.global_rank(), mpi.local_rank(), mpi.node_rank()
    assert "mpi4py" not in sys.modules


def test_no_method_writes_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, OPEN_MPI)
    fake_mpi4py(monkeypatch, FakeComm(rank=6, from_root="node0"))
    assert_no_method_writes_the_environment(MPIEnvironment, 4, 2, read_port=False)
