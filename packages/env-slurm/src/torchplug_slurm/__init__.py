"""env-slurm: the SLURM cluster environment for torchplug, with preemption and requeue."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from torchplug_slurm.environment import SLURMEnvironment
from torchplug_slurm.hostlist import HostlistError, expand_hostlist, first_host
from torchplug_slurm.requeue import RequeueError

__all__ = [
    "HostlistError",
    "RequeueError",
    "SLURMEnvironment",
    "__version__",
    "expand_hostlist",
    "first_host",
]

try:
    __version__ = version("env-slurm")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
