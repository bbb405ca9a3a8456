"""Automatic choice of the cluster environment: priority order, the two switches, and plugin isolation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest
from tests.environment_support import set_env

from torchplug import BrokenPluginError, MisconfigurationError, SettingsError, UnknownPluginError
from torchplug._registry import Provider, Registry
from torchplug.environments.detection import (
    CLUSTER_ENVIRONMENT_VAR,
    SKIP_CLUSTER_ENVIRONMENTS_VAR,
    select_cluster_environment,
)
from torchplug.environments.kubeflow import KubeflowEnvironment
from torchplug.environments.local import LocalEnvironment
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

#: The registrations _builtin.py makes, as dotted paths (imported on first use).
BUILTINS = {
    "torchelastic": "torchplug.environments.torchelastic:TorchElasticEnvironment",
    "lsf": "torchplug.environments.lsf:LSFEnvironment",
    "mpi": "torchplug.environments.mpi:MPIEnvironment",
    "kubeflow": "torchplug.environments.kubeflow:KubeflowEnvironment",
    "local": "torchplug.environments.local:LocalEnvironment",
}


class SlurmLike(LocalEnvironment):
    """Stands in for the env-slurm package's environment (priority 90)."""

    detect_priority: ClassVar[int] = 90

    @classmethod
    def detect(cls) -> bool:
        return "SLURM_NTASKS" in os.environ

    @classmethod
    def detect_reason(cls) -> str:
        return f"SLURM_NTASKS={os.environ['SLURM_NTASKS']}" if cls.detect() else "SLURM_NTASKS not set"


class RaisingDetect(LocalEnvironment):
    detect_priority: ClassVar[int] = 95

    @classmethod
    def detect(cls) -> bool:
        raise RuntimeError("boom")


class AlwaysA(LocalEnvironment):
    detect_priority: ClassVar[int] = 50

    @classmethod
    def detect(cls) -> bool:
        return True


class AlwaysB(AlwaysA):
    pass


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable, so the tests do not depend on the machine they run on."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


def registry(**extra: str | type) -> Registry:
    """The built-in environments plus ``slurm`` (the stand-in) and ``extra``, registered as _builtin.py does."""
    reg = Registry("cluster_environment")
    for name, target in {**BUILTINS, "slurm": SlurmLike, **extra}.items():
        reg.register(name, target)
    return reg


TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job-1",
    "WORLD_SIZE": "4",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
}
SLURM = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0"}
OPEN_MPI = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
PYTORCHJOB = {
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "MASTER_ADDR": "m-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "2",
    "RANK": "0",
}


def lsf_job(tmp_path: Path) -> dict[str, str]:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("batch1\nnodeA\n")
    return {
        "LSB_JOBID": "1",
        "LSB_DJOB_RANKFILE": str(rankfile),
        "JSM_NAMESPACE_SIZE": "2",
        "JSM_NAMESPACE_RANK": "0",
        "JSM_NAMESPACE_LOCAL_RANK": "0",
    }


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param("plain", "local", id="plain-machine-local"),
        pytest.param("torchrun", "torchelastic", id="torchrun"),
        pytest.param("slurm", "slurm", id="slurm"),
        pytest.param("torchrun+slurm", "torchelastic", id="torchrun-inside-slurm-torchelastic-wins"),
        pytest.param("lsf", "lsf", id="lsf"),
        pytest.param("lsf+mpi", "lsf", id="jsrun-also-sets-mpi-variables-lsf-wins"),
        pytest.param("mpi", "mpi", id="mpirun"),
        pytest.param("mpi+slurm", "slurm", id="mpirun-inside-slurm-slurm-wins"),
        pytest.param("kubeflow", "kubeflow", id="pytorchjob"),
        pytest.param("kubeflow+torchrun", "torchelastic", id="torchrun-in-a-pytorchjob"),
    ],
)
def test_the_highest_priority_detected_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scenario: str, expected: str
) -> None:
    envs = {
        "torchrun": TORCHRUN,
        "slurm": SLURM,
        "mpi": OPEN_MPI,
        "kubeflow": PYTORCHJOB,
        "lsf": lsf_job(tmp_path),
        "plain": {},
    }
    for part in scenario.split("+"):
        set_env(monkeypatch, envs[part])
    selection = select_cluster_environment(registry())
    assert selection.name == expected
    assert type(selection.environment) is registry().resolve(expected).load()
    assert selection.trace[-1].startswith(f"{expected}: detected")


def test_trace_lists_the_environments_asked_in_priority_order(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM)
    assert select_cluster_environment(registry()).trace == (
        "torchelastic: not detected (TORCHELASTIC_RUN_ID not set)",
        "slurm: detected (SLURM_NTASKS=2)",
    )
    monkeypatch.delenv("SLURM_NTASKS")
    trace = select_cluster_environment(registry()).trace
    assert [line.split(":")[0] for line in trace] == ["torchelastic", "slurm", "lsf", "mpi", "kubeflow", "local"]
    assert trace[-1] == "local: detected"
    assert all(line.split(": ")[1].startswith("not detected") for line in trace[:-1])


def test_each_selection_is_a_new_instance() -> None:
    reg = registry()
    assert select_cluster_environment(reg).environment is not select_cluster_environment(reg).environment


def test_ties_are_broken_by_name() -> None:
    selection = select_cluster_environment(registry(zeta=AlwaysB, alpha=AlwaysA))
    assert selection.name == "alpha"
    assert "zeta" not in " ".join(selection.trace)


@pytest.mark.parametrize("value", ["slurm", " SLURM , mpi", "slurm,"])
def test_skip_turns_a_detection_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    set_env(monkeypatch, {**SLURM, SKIP_CLUSTER_ENVIRONMENTS_VAR: value})
    selection = select_cluster_environment(registry())
    assert selection.name == "local"
    assert "slurm: skipped (TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)" in selection.trace


def test_skip_can_be_given_as_a_mapping_instead_of_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM)
    assert select_cluster_environment(registry(), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "slurm"}).name == "local"
    assert select_cluster_environment(registry(), {}).name == "slurm"


def test_a_skipped_name_that_no_package_provides_is_a_settings_error() -> None:
    with pytest.raises(SettingsError) as info:
        select_cluster_environment(registry(), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "local,nosuch"})
    message = str(info.value)
    assert message.startswith(
        "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS='local,nosuch' names 'nosuch', which is no cluster environment. "
        "Registered here: "
    )
    assert "local" in message and "horovod" in message  # what is here, and what other packages provide


def test_a_first_party_environment_not_installed_here_may_be_skipped() -> None:
    selection = select_cluster_environment(registry(), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "horovod"})
    assert selection.name == "local"
    assert "horovod: not installed (named in TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)" in selection.trace


def test_skipped_environments_are_not_imported() -> None:
    selection = select_cluster_environment(
        registry(broken="tp_no_such_module:Env"), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "broken"}
    )
    assert "broken: skipped (TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS)" in selection.trace
    assert not any(line.startswith("broken: broken") for line in selection.trace)


def test_skipping_everything_is_a_clear_error() -> None:
    with pytest.raises(MisconfigurationError, match="No cluster environment was detected") as info:
        select_cluster_environment(registry(), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "local"})
    assert "local: skipped" in str(info.value)
    assert "Hint: remove 'local' from TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS" in str(info.value)


def test_force_uses_the_named_environment_without_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**TORCHRUN, CLUSTER_ENVIRONMENT_VAR: "kubeflow"})
    selection = select_cluster_environment(registry())
    assert selection.name == "kubeflow"
    assert isinstance(selection.environment, KubeflowEnvironment)
    assert selection.trace == (
        "kubeflow: forced by TORCHPLUG_CLUSTER_ENVIRONMENT=kubeflow (its detect() says no; used anyway)",
    )


def test_force_an_environment_that_detects(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, TORCHRUN)
    selection = select_cluster_environment(registry(), {CLUSTER_ENVIRONMENT_VAR: " TorchElastic "})
    assert isinstance(selection.environment, TorchElasticEnvironment)
    assert selection.trace == ("torchelastic: forced by TORCHPLUG_CLUSTER_ENVIRONMENT=TorchElastic",)


def test_force_wins_over_skip_and_a_raising_detect() -> None:
    selection = select_cluster_environment(
        registry(raising=RaisingDetect), {CLUSTER_ENVIRONMENT_VAR: "raising", SKIP_CLUSTER_ENVIRONMENTS_VAR: "raising"}
    )
    assert selection.name == "raising"
    assert "its detect() raised RuntimeError: boom; used anyway" in selection.trace[0]


def test_force_an_unknown_name_lists_the_registered_ones() -> None:
    with pytest.raises(UnknownPluginError) as info:
        select_cluster_environment(registry(), {CLUSTER_ENVIRONMENT_VAR: "kubeflw"})
    message = str(info.value)
    assert message.startswith("TORCHPLUG_CLUSTER_ENVIRONMENT='kubeflw' cannot be used: Unknown cluster environment")
    assert "Did you mean 'kubeflow'?" in message
    assert "Installed: kubeflow, local, lsf, mpi, slurm, torchelastic." in message
    assert "Or unset TORCHPLUG_CLUSTER_ENVIRONMENT" in message


def test_force_a_broken_environment_raises_its_error() -> None:
    with pytest.raises(BrokenPluginError) as info:
        select_cluster_environment(registry(broken="tp_no_such_module:Env"), {CLUSTER_ENVIRONMENT_VAR: "broken"})
    message = str(info.value)
    assert message.startswith("TORCHPLUG_CLUSTER_ENVIRONMENT='broken' cannot be used: Cluster environment 'broken'")
    assert "is broken: ModuleNotFoundError" in message


@pytest.mark.parametrize(
    ("target", "error"),
    [
        pytest.param(
            "tp_no_such_module:Env", "ModuleNotFoundError: No module named 'tp_no_such_module'", id="import-fails"
        ),
        pytest.param("torchplug.environments.local:find_free_port", "TypeError:", id="not-a-cluster-environment"),
    ],
)
def test_a_broken_environment_is_reported_and_passed_over(target: str, error: str) -> None:
    selection = select_cluster_environment(registry(broken=target))
    assert selection.name == "local"
    broken = [line for line in selection.trace if line.startswith("broken:")]
    assert len(broken) == 1
    assert broken[0].startswith(f"broken: broken: {error}")
    assert "(from user code (registered at run time))" in broken[0]


def test_a_raising_detect_is_reported_and_treated_as_not_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM)
    selection = select_cluster_environment(registry(raising=RaisingDetect))
    assert selection.name == "slurm"
    assert selection.trace[:2] == (
        "torchelastic: not detected (TORCHELASTIC_RUN_ID not set)",
        "raising: broken: detect() raised RuntimeError: boom",
    )


class _TwoProviders:
    """A registry host through which two distributions register the same name (a conflict)."""

    def __init__(self) -> None:
        self.provider: Provider | None = None

    def ensure_loaded(self) -> None:
        pass

    def current_provider(self) -> Provider | None:
        return self.provider

    def failed_plugins(self) -> list[object]:
        return []

    def preferred_provider(self, name: str) -> str | None:
        return None


def test_a_name_two_distributions_claim_is_reported_not_asked() -> None:
    host = _TwoProviders()
    reg = Registry("cluster_environment", host)  # type: ignore[arg-type]
    for dist in ("vendor-a", "vendor-b"):
        host.provider = Provider(dist, dist, "1.0")
        reg.register("shared", AlwaysA)
    host.provider = Provider("builtin", "core", "0.1", builtin=True)
    reg.register("local", LocalEnvironment)
    host.provider = None
    selection = select_cluster_environment(reg, {})
    assert selection.name == "local"
    assert selection.trace[0].startswith(
        "shared: not asked (provided by several distributions: vendor-a 1.0, "
        "vendor-b 1.0; pick one with TORCHPLUG_PREFER=shared=<distribution>)"
    )


def test_selection_does_not_write_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for values in (TORCHRUN, SLURM, OPEN_MPI, PYTORCHJOB, lsf_job(tmp_path)):
        set_env(monkeypatch, values)
    before = dict(os.environ)
    select_cluster_environment(registry())
    select_cluster_environment(registry(), {CLUSTER_ENVIRONMENT_VAR: "mpi"})
    assert dict(os.environ) == before


def test_detection_imports_neither_torch_nor_mpi4py(tmp_path: Path) -> None:
    code = f"""
import os, sys
os.environ.update(OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0",
                  OMPI_COMM_WORLD_LOCAL_SIZE="2")
from torchplug._registry import Registry
from torchplug.environments.detection import select_cluster_environment
registry = Registry("cluster_environment")
for name, target in {BUILTINS!r}.items():
    registry.register(name, target)
selection = select_cluster_environment(registry, {{}})
selection.environment.world_size(), selection.environment.node_rank()
print(selection.name, "torch" in sys.modules, "mpi4py" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PREFIXES) and k not in _NAMES}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["mpi", "False", "False"]


class BlockingDetect(LocalEnvironment):
    detect_priority: ClassVar[int] = 95
    release = threading.Event()

    @classmethod
    def detect(cls) -> bool:
        cls.release.wait(30)
        return True


def test_a_detect_that_blocks_is_left_behind_and_detection_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, {**SLURM, "TORCHPLUG_PLUGIN_TIMEOUT": "0.2"})
    try:
        selection = select_cluster_environment(registry(blocking=BlockingDetect))
    finally:
        BlockingDetect.release.set()
    assert selection.name == "slurm"
    assert selection.trace[1].startswith(
        "blocking: broken: Cluster environment 'blocking' from user code (registered at run time) did not finish "
        "running detect() within 0.2 s (TORCHPLUG_PLUGIN_TIMEOUT=0.2)."
    )


def test_a_skip_list_that_is_not_a_list_of_names_is_refused() -> None:
    with pytest.raises(
        SettingsError, match=r"TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS='slurm;mpi' has the item 'slurm;mpi'"
    ):
        select_cluster_environment(registry(), {SKIP_CLUSTER_ENVIRONMENTS_VAR: "slurm;mpi"})
