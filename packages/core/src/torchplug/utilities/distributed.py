"""Joining the process group, once per process, with errors that say what to check."""

from __future__ import annotations

import atexit
import time
import weakref
from datetime import timedelta
from typing import Final

import torch.distributed as dist

from torchplug._errors import MisconfigurationError
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.utilities.rank_zero import log

__all__ = ["init_process_group"]

#: Seconds the exit handler waits, without the GIL, when the process group outlives its destruction.
_SETTLE_S: Final = 0.2


def _format_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def init_process_group(environment: ClusterEnvironment, backend: str, timeout: timedelta) -> None:
    """Join the default process group described by ``environment`` (a no-op when already joined).

    The group lives until the process exits, so ``fit`` followed by ``test`` in one script reuses it.

    Raises:
        MisconfigurationError: The group already exists with another world size or backend.
    """
    world_size, rank = environment.world_size(), environment.global_rank()
    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise MisconfigurationError(
                f"A process group of world size {dist.get_world_size()} (rank {dist.get_rank()}) already exists, but "
                f"this Trainer needs world size {world_size} (rank {rank}). Hint: use the same devices= and "
                "num_nodes= for every Trainer in one script."
            )
        return
    if not dist.is_available():
        raise MisconfigurationError("This torch build has no torch.distributed; use a single-device strategy.")
    address = f"tcp://{_format_host(environment.main_address)}:{environment.main_port}"
    log.info("rank %d/%d joining the %s process group at %s", rank, world_size, backend, address)
    restarts = environment.restart_count()
    if restarts > 0:
        # A restarted job may meet in the store of its first run (torchrun's agent keeps its store and
        # MASTER_PORT across --max-restarts): the keys of the dead workers would still be there, and gloo
        # would connect to their closed ports. Each run gets its own namespace of that store.
        from torch.distributed import PrefixStore  # type: ignore[attr-defined]  # public, not re-exported in the stubs
        from torch.distributed.rendezvous import rendezvous

        store, _, _ = next(rendezvous(address, rank=rank, world_size=world_size, timeout=timeout))
        store = PrefixStore(f"torchplug/restart{restarts}/", store)
        dist.init_process_group(backend, store=store, world_size=world_size, rank=rank, timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=address, world_size=world_size, rank=rank, timeout=timeout)
    atexit.register(_destroy)


def _destroy() -> None:
    """At exit, while Python is still alive: leave the process group, and let its worker threads go idle.

    ``destroy_process_group()`` only drops torch's references to the group. When something else
    keeps it alive (DDP does, through ``torch.distributed.nn``'s default arguments), gloo's worker
    threads outlive the call. A worker that is still releasing its last collective (whose tensors
    and thread-local state hold Python objects) needs the GIL; once the interpreter is finalizing,
    Python ends such a thread mid-destructor and the process aborts ("terminate called without an
    active exception", seen in about 1 run in 20 of a 2-rank job). Sleeping gives those workers the
    GIL first; a group that died with the call joined its threads already and needs no wait.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    group = weakref.ref(dist.group.WORLD)
    try:
        dist.destroy_process_group()
    except Exception:  # the process is exiting anyway; a peer may be gone already
        return
    if group() is not None:
        time.sleep(_SETTLE_S)
