"""The ``local`` cluster environment: this machine, processes started by torchplug or by hand."""

from __future__ import annotations

import os
import socket
from typing import ClassVar

from typing_extensions import override

from torchplug.environments.cluster_environment import ClusterEnvironment, Evidence
from torchplug.utilities.env_vars import env_int

__all__ = ["LocalEnvironment", "find_free_port"]


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalEnvironment(ClusterEnvironment):
    """The default: one machine, ranks from torchplug's launchers (or ``LOCAL_RANK`` when started by hand).

    Reads ``MASTER_ADDR``/``MASTER_PORT`` (defaults: 127.0.0.1 and a free port), ``LOCAL_RANK``
    and ``NODE_RANK`` (or ``GROUP_RANK``).
    """

    detect_priority: ClassVar[int] = 0

    def __init__(self) -> None:
        self._world_size = 1
        self._global_rank = 0
        self._port: int | None = None

    @classmethod
    @override
    def evidence(cls) -> Evidence:
        """Always detected, with nothing to show: the fallback when no scheduler is detected."""
        return Evidence(detected=True, reason=None)

    @property
    @override
    def creates_processes_externally(self) -> bool:
        """True when ``LOCAL_RANK`` is set, meaning the processes were started by someone else.

        Raises:
            SettingsError: ``LOCAL_RANK`` is set to something other than a rank (an integer >= 0).
        """
        return env_int("LOCAL_RANK", None, minimum=0) is not None

    @property
    @override
    def main_address(self) -> str:
        """``MASTER_ADDR``, else 127.0.0.1."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    @override
    def main_port(self) -> int:
        """``MASTER_PORT``, else a free port chosen once for this environment object.

        Raises:
            SettingsError: ``MASTER_PORT`` is not a port number (1-65535).
        """
        port = env_int("MASTER_PORT", None, minimum=1, maximum=65535)
        if port is not None:
            return port
        if self._port is None:
            self._port = find_free_port()
        return self._port

    @override
    def world_size(self) -> int:
        """The world size the strategy set."""
        return self._world_size

    @override
    def set_world_size(self, size: int) -> None:
        """Set by the strategy: devices × nodes."""
        self._world_size = size

    @override
    def global_rank(self) -> int:
        """The rank the strategy set."""
        return self._global_rank

    @override
    def set_global_rank(self, rank: int) -> None:
        """Set by the strategy: node rank × devices + local rank."""
        self._global_rank = rank

    @override
    def local_rank(self) -> int:
        """``LOCAL_RANK``, else 0."""
        return env_int("LOCAL_RANK", 0, minimum=0)

    @override
    def node_rank(self) -> int:
        """``NODE_RANK``, else ``GROUP_RANK``, else 0."""
        if os.environ.get("NODE_RANK", "").strip():
            return env_int("NODE_RANK", 0, minimum=0)
        return env_int("GROUP_RANK", 0, minimum=0)
