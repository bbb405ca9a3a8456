"""env-slurm: the SLURM cluster environment for torchplug, with preemption and requeue.

Importing this package imports no torch; each public name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug_slurm._hostlist import HostlistError, expand_hostlist, first_host
    from torchplug_slurm._vendor import RequeueError
    from torchplug_slurm.environment import SLURMEnvironment

__all__ = [
    "HostlistError",
    "RequeueError",
    "SLURMEnvironment",
    "__version__",
    "expand_hostlist",
    "first_host",
]

_LAZY: Final = {
    "SLURMEnvironment": "torchplug_slurm.environment",
    "HostlistError": "torchplug_slurm._hostlist",
    "expand_hostlist": "torchplug_slurm._hostlist",
    "first_host": "torchplug_slurm._hostlist",
    "RequeueError": "torchplug_slurm._vendor",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), distribution="env-slurm")
