"""Cluster environments: where ranks and the rendezvous come from. All are torch-free."""

from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence
from torchplug.utilities.imports import lazy_attributes

__all__ = [
    "ClusterEnvironment",
    "Evidence",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LocalEnvironment",
    "MPIEnvironment",
    "TorchElasticEnvironment",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "LocalEnvironment": "torchplug.environments.local",
        "TorchElasticEnvironment": "torchplug.environments.torchelastic",
        "KubeflowEnvironment": "torchplug.environments.kubeflow",
        "LSFEnvironment": "torchplug.environments.lsf",
        "MPIEnvironment": "torchplug.environments.mpi",
    },
    globals(),
)
