"""The detection spec a vendor implements: ``evidence()`` alone gives ``detect()``, its reason and the trace."""

from __future__ import annotations

import os
from typing import ClassVar

import pytest
from typing_extensions import override

from torchplug._registry import Registry
from torchplug.environments import ClusterEnvironment, Evidence
from torchplug.environments.detection import ask, select_cluster_environment
from torchplug.environments.kubeflow import KubeflowEnvironment
from torchplug.environments.local import LocalEnvironment
from torchplug.environments.lsf import LSFEnvironment
from torchplug.environments.mpi import MPIEnvironment
from torchplug.environments.torchelastic import TorchElasticEnvironment

FIRST_PARTY = [LocalEnvironment, TorchElasticEnvironment, KubeflowEnvironment, LSFEnvironment, MPIEnvironment]


class AcmeEnvironment(ClusterEnvironment):
    """A third-party scheduler: everything a vendor writes for detection is :meth:`evidence`."""

    detect_priority: ClassVar[int] = 95

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        return Evidence.unset(("ACME_JOB", "ACME_RANK")) or Evidence.found(f"ACME_JOB={os.environ['ACME_JOB']}")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return "acme-0"

    @property
    @override
    def main_port(self) -> int:
        return 1234

    @override
    def world_size(self) -> int:
        return 2

    @override
    def global_rank(self) -> int:
        return int(os.environ["ACME_RANK"])

    @override
    def local_rank(self) -> int:
        return 0

    @override
    def node_rank(self) -> int:
        return self.global_rank()


class NoEvidence(AcmeEnvironment):
    """Declares no evidence: never detected, nothing to show."""

    @classmethod
    @override
    def evidence(cls) -> Evidence | None:
        return None


@pytest.fixture(autouse=True)
def no_acme(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACME_JOB", "ACME_RANK"):
        monkeypatch.delenv(name, raising=False)


def test_evidence_alone_answers_detect_and_detect_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AcmeEnvironment.detect() is False
    assert AcmeEnvironment.detect_reason() == "ACME_JOB, ACME_RANK not set"
    monkeypatch.setenv("ACME_JOB", "7")
    assert AcmeEnvironment.detect_reason() == "ACME_RANK not set"
    monkeypatch.setenv("ACME_RANK", "1")
    assert AcmeEnvironment.detect() is True
    assert AcmeEnvironment.detect_reason() == "ACME_JOB=7"


def test_the_trace_shows_the_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry("cluster_environment")
    registry.register("acme", AcmeEnvironment)
    registry.register("local", LocalEnvironment)
    assert select_cluster_environment(registry, {}).trace == (
        "acme: not detected (ACME_JOB, ACME_RANK not set)",
        "local: detected",
    )
    monkeypatch.setenv("ACME_JOB", "7")
    monkeypatch.setenv("ACME_RANK", "1")
    selection = select_cluster_environment(registry, {})
    assert selection.name == "acme"
    assert selection.trace == ("acme: detected (ACME_JOB=7)",)


def test_no_evidence_is_never_detected_and_shows_no_reason() -> None:
    assert NoEvidence.detect() is False
    assert NoEvidence.detect_reason() is None
    assert ask(NoEvidence) == (False, "not detected")


def test_the_base_declares_no_evidence() -> None:
    assert ClusterEnvironment.evidence() is None


@pytest.mark.parametrize("environment", FIRST_PARTY, ids=lambda cls: cls.__name__)
def test_first_party_environments_supply_only_their_evidence(environment: type[ClusterEnvironment]) -> None:
    assert "evidence" in vars(environment)
    assert not {"detect", "detect_reason"} & set(vars(environment))


def test_evidence_constructors() -> None:
    assert Evidence.found("A=1") == Evidence(detected=True, reason="A=1")
    assert Evidence.absent("A not set") == Evidence(detected=False, reason="A not set")
