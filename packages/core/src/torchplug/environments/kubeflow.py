"""The ``kubeflow`` cluster environment: a Kubeflow ``PyTorchJob`` with one process per pod.

Imports no torch.
"""

from __future__ import annotations

import os
from typing import ClassVar

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.environments._variables import read_int, read_text
from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence

__all__ = ["KubeflowEnvironment"]

#: Every one of these must be set for detection (the operator sets the last four in each pod).
_REQUIRED = ("KUBERNETES_SERVICE_HOST", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")

_HINT = (
    "Hint: the Kubeflow training operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK in each "
    'pod of a PyTorchJob; outside one, choose another environment (plugins=["local"]).'
)


class KubeflowEnvironment(ClusterEnvironment):
    """A Kubeflow ``PyTorchJob`` (training operator) that runs one training process per pod.

    Assumption: each pod (replica) runs exactly one process, started directly (not by torchrun).
    So ``WORLD_SIZE`` is the number of pods, ``RANK`` is both the global rank and the node rank,
    and the local rank is always 0. Use ``devices=1`` and ``num_nodes=<replicas>``. For several
    processes per pod, start them with ``torchrun`` (``nprocPerNode`` in the PyTorchJob): torchplug
    then detects the ``torchelastic`` environment instead.

    Detection asks for strong signals only: it needs
    ``KUBERNETES_SERVICE_HOST`` *and* ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``,
    and no torchrun (``TORCHELASTIC_RUN_ID`` unset). Nothing is written to ``os.environ``.
    """

    detect_priority: ClassVar[int] = 60

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Detected inside a Kubernetes pod that has the PyTorchJob variables and was not started by torchrun."""
        missing = Evidence.unset(_REQUIRED)
        if missing is not None:
            return missing
        if "TORCHELASTIC_RUN_ID" in os.environ:
            return Evidence.absent("started by torchrun (TORCHELASTIC_RUN_ID set)")
        return Evidence.found(f"KUBERNETES_SERVICE_HOST, MASTER_ADDR set, WORLD_SIZE={os.environ['WORLD_SIZE']}")

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """Always True: the operator started the pods, one process each; torchplug must not spawn."""
        return True

    @property
    @override
    def main_address(self) -> str:
        """``MASTER_ADDR``: the master replica's service name, set by the operator.

        Raises:
            RuntimeError: ``MASTER_ADDR`` is not set.
        """
        return read_text("kubeflow", "MASTER_ADDR", _HINT)

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT``, set by the operator.

        Raises:
            RuntimeError: ``MASTER_PORT`` is not set or not an integer.
        """
        return _read_int("MASTER_PORT")

    @override
    def world_size(self) -> int:
        """``WORLD_SIZE``: the number of pods (one process each)."""
        return _read_int("WORLD_SIZE")

    @override
    def global_rank(self) -> int:
        """``RANK``: this pod's index."""
        return _read_int("RANK")

    @override
    def local_rank(self) -> int:
        """Always 0: one process per pod."""
        return 0

    @override
    def node_rank(self) -> int:
        """``RANK``: with one process per pod, each pod is a node."""
        return self.global_rank()

    @override
    def set_world_size(self, size: int) -> None:
        """Ignored: the PyTorchJob's replica count decides the world size."""

    @override
    def set_global_rank(self, rank: int) -> None:
        """Ignored: the operator decides the ranks."""

    @override
    def processes_per_node(self) -> int | None:
        """Always 1: one process per pod."""
        return 1

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check ``devices=``/``num_nodes=`` against one process per pod and ``WORLD_SIZE`` pods.

        Args:
            num_devices: The Trainer's ``devices`` count (processes per node, so it must be 1).
            num_nodes: The Trainer's ``num_nodes`` (the number of pods).

        Raises:
            MisconfigurationError: The PyTorchJob asks for several processes per pod
                (``PET_NPROC_PER_NODE`` > 1) without torchrun, ``devices`` is not 1, or
                ``num_nodes`` differs from ``WORLD_SIZE``.
        """
        nproc = os.environ.get("PET_NPROC_PER_NODE", "")
        if nproc.isdigit() and int(nproc) > 1:
            raise MisconfigurationError(
                f"The PyTorchJob sets nprocPerNode={nproc} (PET_NPROC_PER_NODE), but this process was not "
                "started by torchrun, and the kubeflow environment runs one process per pod. Hint: start the "
                "container's command with `torchrun` (it reads the PET_* variables); torchplug then uses the "
                "torchelastic environment."
            )
        world_size = self.world_size()
        if num_devices != 1:
            raise MisconfigurationError(
                f"You set `devices={num_devices}`, but the kubeflow environment runs one process per pod. "
                f"Hint: set `devices=1` and `num_nodes={world_size}`, or start the processes in each pod with "
                "`torchrun --nproc_per_node=N` (nprocPerNode in the PyTorchJob)."
            )
        if num_nodes != world_size:
            raise MisconfigurationError(
                f"You set `num_nodes={num_nodes}`, but the PyTorchJob runs WORLD_SIZE={world_size} pods. "
                f"Hint: set `num_nodes={world_size}`."
            )

    @override
    def teardown(self) -> None:
        """Nothing to undo: this environment never writes ``os.environ``."""


def _read_int(name: str) -> int:
    return read_int("kubeflow", name, _HINT)
