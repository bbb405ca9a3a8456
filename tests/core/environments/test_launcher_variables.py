"""A launcher's variable that torchplug reads is checked where it is read: a bad value is refused, naming it."""

from __future__ import annotations

import pytest

from torchplug import SettingsError, Trainer
from torchplug.environments.local import LocalEnvironment
from torchplug.utilities import rank_zero_only


@pytest.mark.parametrize(
    ("variable", "read"),
    [
        pytest.param("LOCAL_RANK", lambda env: env.creates_processes_externally, id="LOCAL_RANK-launched"),
        pytest.param("LOCAL_RANK", lambda env: env.local_rank(), id="LOCAL_RANK"),
        pytest.param("NODE_RANK", lambda env: env.node_rank(), id="NODE_RANK"),
        pytest.param("GROUP_RANK", lambda env: env.node_rank(), id="GROUP_RANK"),
        pytest.param("MASTER_PORT", lambda env: env.main_port, id="MASTER_PORT"),
    ],
)
def test_the_local_environment_refuses_a_variable_that_is_not_a_number(
    monkeypatch: pytest.MonkeyPatch, variable: str, read: object
) -> None:
    for name in ("LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "abc")
    with pytest.raises(SettingsError, match=f"^{variable}='abc' is not valid. Allowed: an integer"):
        read(LocalEnvironment())  # type: ignore[operator]


def test_a_trainer_refuses_a_local_rank_that_is_not_a_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "abc")
    with pytest.raises(SettingsError, match=r"^LOCAL_RANK='abc' is not valid"):
        Trainer(accelerator="cpu", devices=1, logger=False)


@pytest.mark.parametrize("variable", ["RANK", "SLURM_PROCID", "PMI_RANK"])
def test_rank_zero_only_refuses_a_rank_that_is_not_a_rank(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", None)
    for name in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "abc")
    with pytest.raises(SettingsError, match=f"^{variable}='abc' is not valid"):
        rank_zero_only(lambda: "here")()
