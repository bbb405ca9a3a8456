"""The kubeflow environment: a PyTorchJob with one process per pod, detected only on strong signals."""

from __future__ import annotations

import os

import pytest
from tests.environment_support import assert_no_method_writes_the_environment, set_env

from torchplug import MisconfigurationError
from torchplug.environments.kubeflow import KubeflowEnvironment

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

#: What any Kubernetes pod has: Lightning's old detection matched this alone.
ANY_POD = {
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "KUBERNETES_PORT": "tcp://10.0.0.1:443",
    "KUBERNETES_SERVICE_PORT": "443",
}
#: What the training operator adds in each pod of a PyTorchJob.
PYTORCHJOB = {**ANY_POD, "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "2"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable, so the tests do not depend on the machine they run on."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


def without(values: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in values.items() if k != name}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(PYTORCHJOB, True, id="pytorchjob"),
        pytest.param(ANY_POD, False, id="any-kubernetes-pod"),
        pytest.param(without(PYTORCHJOB, "KUBERNETES_SERVICE_HOST"), False, id="not-in-kubernetes"),
        pytest.param(without(PYTORCHJOB, "MASTER_ADDR"), False, id="no-master-addr"),
        pytest.param(without(PYTORCHJOB, "MASTER_PORT"), False, id="no-master-port"),
        pytest.param(without(PYTORCHJOB, "WORLD_SIZE"), False, id="no-world-size"),
        pytest.param(without(PYTORCHJOB, "RANK"), False, id="no-rank"),
        pytest.param({**PYTORCHJOB, "TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "0"}, False, id="torchrun-in-a-pod"),
        pytest.param({}, False, id="plain-machine"),
    ],
)
def test_detect_needs_strong_signals(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool) -> None:
    set_env(monkeypatch, env)
    assert KubeflowEnvironment.detect() is expected


def test_detect_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, ANY_POD)
    assert KubeflowEnvironment.detect_reason() == "MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK not set"
    set_env(monkeypatch, {**PYTORCHJOB, "TORCHELASTIC_RUN_ID": "x"})
    assert "torchrun" in KubeflowEnvironment.detect_reason()


def test_one_process_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, PYTORCHJOB)
    env = KubeflowEnvironment()
    assert env.creates_processes_externally is True
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (4, 2, 0, 2)
    assert env.processes_per_node() == 1
    assert (env.main_address, env.main_port) == ("job-master-0", 23456)
    env.set_world_size(1)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (4, 2)


def test_missing_variables_are_clear_errors_when_chosen_explicitly() -> None:
    env = KubeflowEnvironment()
    with pytest.raises(RuntimeError, match="needs MASTER_ADDR, but it is not set") as info:
        _ = env.main_address
    assert "PyTorchJob" in str(info.value)
    with pytest.raises(RuntimeError, match="needs WORLD_SIZE, but it is not set"):
        env.world_size()


def test_validate_settings_accepts_one_device_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, PYTORCHJOB)
    KubeflowEnvironment().validate_settings(1, 4)


@pytest.mark.parametrize(
    ("extra", "devices", "num_nodes", "parts"),
    [
        pytest.param(
            {},
            2,
            4,
            [
                "You set `devices=2`",
                "one process per pod",
                "Hint: set `devices=1` and `num_nodes=4`",
                "torchrun --nproc_per_node",
            ],
            id="several-devices",
        ),
        pytest.param(
            {}, 1, 2, ["You set `num_nodes=2`", "WORLD_SIZE=4 pods", "Hint: set `num_nodes=4`"], id="wrong-num-nodes"
        ),
        pytest.param(
            {"PET_NPROC_PER_NODE": "4"},
            1,
            4,
            ["nprocPerNode=4 (PET_NPROC_PER_NODE)", "not started by torchrun", "Hint:", "torchelastic"],
            id="nproc-per-node-without-torchrun",
        ),
    ],
)
def test_validate_settings_errors(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], devices: int, num_nodes: int, parts: list[str]
) -> None:
    set_env(monkeypatch, {**PYTORCHJOB, **extra})
    with pytest.raises(MisconfigurationError) as info:
        KubeflowEnvironment().validate_settings(devices, num_nodes)
    for part in parts:
        assert part in str(info.value)


def test_no_method_writes_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, PYTORCHJOB)
    assert_no_method_writes_the_environment(KubeflowEnvironment, 1, 4)
