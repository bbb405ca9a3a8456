"""Joining the process group, once per process, with errors that say what to check."""

from __future__ import annotations

import atexit
from datetime import timedelta

import torch.distributed as dist

from torchplug._errors import MisconfigurationError
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.utilities.rank_zero import log

__all__ = ["init_process_group"]


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
    dist.init_process_group(backend, init_method=address, world_size=world_size, rank=rank, timeout=timeout)
    atexit.register(_destroy)


def _destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # the process is exiting anyway; a peer may be gone already
            pass
