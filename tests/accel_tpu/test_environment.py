"""The ``xla_runtime`` cluster environment: ranks from the torch_xla runtime, never detected."""

from __future__ import annotations

from types import ModuleType

import pytest

import torchplug
from torchplug.environments.detection import select_cluster_environment
from torchplug_tpu import XLAEnvironment


def test_ranks_come_from_the_runtime(fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_XLA_WORLD_SIZE", "4")
    monkeypatch.setenv("FAKE_XLA_ORDINAL", "3")
    environment = XLAEnvironment()
    assert (environment.world_size(), environment.global_rank(), environment.local_rank(), environment.node_rank()) == (
        4,
        3,
        3,
        0,
    )
    monkeypatch.setenv("FAKE_XLA_ORDINAL", "1")  # never cached: each launched process asks for itself
    assert environment.global_rank() == 1
    environment.set_global_rank(0)  # the runtime decides: ignored
    environment.set_world_size(9)
    assert (environment.global_rank(), environment.world_size()) == (1, 4)


def test_it_starts_no_processes_and_has_no_rendezvous_address() -> None:
    environment = XLAEnvironment()
    assert environment.creates_processes_externally is False
    with pytest.raises(
        NotImplementedError,
        match=r"torch_xla runtime does its own rendezvous\. Hint: use it with "
        "strategy='xla'",
    ):
        _ = environment.main_address
    with pytest.raises(NotImplementedError, match="no main port"):
        _ = environment.main_port


@pytest.mark.usefixtures("fake_xla")
def test_it_is_never_detected_even_on_a_tpu_host() -> None:
    assert XLAEnvironment.detect() is False
    assert XLAEnvironment.detect_reason() == "never detected: strategy='xla' and 'single_xla' bring it"
    selection = select_cluster_environment(torchplug.plugin_host().registry("cluster_environment"))
    assert selection.name != "xla_runtime"


def test_it_can_be_forced_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_CLUSTER_ENVIRONMENT", "xla_runtime")
    selection = select_cluster_environment(torchplug.plugin_host().registry("cluster_environment"))
    assert isinstance(selection.environment, XLAEnvironment)
    assert selection.trace == (
        "xla_runtime: forced by TORCHPLUG_CLUSTER_ENVIRONMENT=xla_runtime (its detect() says no; used anyway)",
    )


def test_the_environment_supplies_only_its_evidence() -> None:
    """detect() and detect_reason() come from the core's ClusterEnvironment, derived from evidence()."""
    assert "evidence" in vars(XLAEnvironment)
    assert not {"detect", "detect_reason"} & set(vars(XLAEnvironment))
