"""What the cluster environment test suites share: setting variables, and checking that nothing writes any.

Used by ``tests/core/environments`` and ``tests/env_slurm``.
"""

from __future__ import annotations

import os

import pytest

from torchplug.environments.cluster_environment import ClusterEnvironment


def set_env(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    """Set every variable of ``values`` for the test (``monkeypatch`` restores them afterwards)."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def assert_no_method_writes_the_environment(
    environment_class: type[ClusterEnvironment], devices: int, num_nodes: int, *, read_port: bool = True
) -> None:
    """Call every method of ``environment_class`` (validating ``devices`` x ``num_nodes``): ``os.environ`` stays.

    ``read_port=False`` skips ``main_port``, for environments that need more than variables to find it.
    """
    before = dict(os.environ)
    environment_class.detect()
    environment_class.detect_reason()
    env = environment_class()
    _ = (env.creates_processes_externally, env.main_address, env.main_port if read_port else None)
    env.world_size(), env.global_rank(), env.local_rank(), env.node_rank(), env.processes_per_node()
    env.set_world_size(3)
    env.set_global_rank(2)
    env.validate_settings(devices, num_nodes)
    env.teardown()
    assert dict(os.environ) == before
