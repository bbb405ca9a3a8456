"""The torchelastic environment: processes started by torchrun."""

from __future__ import annotations

import os

import pytest
from tests.environment_support import assert_no_method_writes_the_environment, set_env

from torchplug import MisconfigurationError
from torchplug.environments.torchelastic import TorchElasticEnvironment

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

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job-1",
    "WORLD_SIZE": "8",
    "RANK": "5",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable, so the tests do not depend on the machine they run on."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(TORCHRUN, True, id="torchrun"),
        pytest.param({k: v for k, v in TORCHRUN.items() if k != "GROUP_RANK"}, True, id="torchrun-without-group-rank"),
        pytest.param({}, False, id="plain-machine"),
        pytest.param(
            {k: v for k, v in TORCHRUN.items() if k != "TORCHELASTIC_RUN_ID"}, False, id="rank-variables-without-run-id"
        ),
        pytest.param({"TORCHELASTIC_RUN_ID": "job-1"}, False, id="run-id-without-rank-variables"),
        pytest.param({"SLURM_NTASKS": "2", "SLURM_PROCID": "0"}, False, id="slurm-only"),
    ],
)
def test_detect(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool) -> None:
    set_env(monkeypatch, env)
    assert TorchElasticEnvironment.detect() is expected


def test_detect_reason_names_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TorchElasticEnvironment.detect_reason() == "TORCHELASTIC_RUN_ID not set"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")
    assert TorchElasticEnvironment.detect_reason() == "TORCHELASTIC_RUN_ID set, but not WORLD_SIZE, RANK, LOCAL_RANK"
    set_env(monkeypatch, TORCHRUN)
    assert TorchElasticEnvironment.detect_reason() == "TORCHELASTIC_RUN_ID=job-1, WORLD_SIZE=8"


def test_ranks_come_from_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, TORCHRUN)
    env = TorchElasticEnvironment()
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 5, 1, 1)
    assert env.processes_per_node() == 4
    assert (env.main_address, env.main_port) == ("node0", 29500)


def test_node_rank_defaults_to_zero_and_processes_per_node_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {k: v for k, v in TORCHRUN.items() if k not in ("GROUP_RANK", "LOCAL_WORLD_SIZE")})
    env = TorchElasticEnvironment()
    assert env.node_rank() == 0
    assert env.processes_per_node() is None


def test_setters_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, TORCHRUN)
    env = TorchElasticEnvironment()
    env.set_world_size(2)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 5)


def test_missing_master_addr_is_a_clear_error_not_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {k: v for k, v in TORCHRUN.items() if k not in ("MASTER_ADDR", "MASTER_PORT")})
    env = TorchElasticEnvironment()
    with pytest.raises(RuntimeError, match="needs MASTER_ADDR, but it is not set") as info:
        _ = env.main_address
    assert "torchrun --nproc_per_node" in str(info.value)
    with pytest.raises(RuntimeError, match="needs MASTER_PORT, but it is not set"):
        _ = env.main_port
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ


@pytest.mark.parametrize("name", ["WORLD_SIZE", "RANK", "MASTER_PORT"])
def test_a_variable_that_is_not_an_integer_is_named(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    set_env(monkeypatch, {**TORCHRUN, name: "four"})
    env = TorchElasticEnvironment()
    with pytest.raises(RuntimeError, match=f"read {name}='four', which is not an integer"):
        _read(env, name)


def _read(env: TorchElasticEnvironment, name: str) -> int:
    if name == "MASTER_PORT":
        return env.main_port
    return {"WORLD_SIZE": env.world_size, "RANK": env.global_rank}[name]()


def test_validate_settings_accepts_matching_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, TORCHRUN)
    TorchElasticEnvironment().validate_settings(4, 2)


@pytest.mark.parametrize(
    ("env", "devices", "num_nodes", "parts"),
    [
        pytest.param(
            TORCHRUN,
            2,
            4,
            [
                "You set `devices=2`",
                "torchrun started 4 processes per node",
                "`--nproc_per_node=4`",
                "LOCAL_WORLD_SIZE=4",
                "Hint: set `devices=4`",
            ],
            id="devices-vs-nproc-per-node",
        ),
        pytest.param(
            TORCHRUN,
            4,
            1,
            [
                "You set `devices=4` and `num_nodes=1` (4 processes)",
                "torchrun started WORLD_SIZE=8 processes",
                "`--nproc_per_node` × `--nnodes`",
                "Hint:",
                "`num_nodes=2`",
            ],
            id="num-nodes-vs-nnodes",
        ),
        pytest.param(
            {k: v for k, v in TORCHRUN.items() if k != "LOCAL_WORLD_SIZE"},
            2,
            1,
            [
                "You set `devices=2` and `num_nodes=1` (2 processes)",
                "WORLD_SIZE=8",
                "`num_nodes=` to match `--nnodes`",
                "devices × num_nodes = 8",
            ],
            id="total-without-local-world-size",
        ),
    ],
)
def test_validate_settings_errors_name_the_flags(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], devices: int, num_nodes: int, parts: list[str]
) -> None:
    set_env(monkeypatch, env)
    with pytest.raises(MisconfigurationError) as info:
        TorchElasticEnvironment().validate_settings(devices, num_nodes)
    assert isinstance(info.value, ValueError)
    for part in parts:
        assert part in str(info.value)


def test_no_method_writes_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, TORCHRUN)
    assert_no_method_writes_the_environment(TorchElasticEnvironment, 4, 2)
