"""Fixtures for the conformance suite's own tests: plugin hosts holding the faulty plugins of broken.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from torchplug._host import PluginHost

#: The plugin module registering every faulty plugin (loaded by name, as TORCHPLUG_PLUGINS does).
BROKEN_PLUGIN = "tests.core.testing.broken_plugin"
FAKE_VENDOR = Path(__file__).parent / "fake_vendor"
REPO_ROOT = Path(__file__).resolve().parents[3]

#: The checks that train, skipped where a test is about another check (each is covered elsewhere).
TRAINING = (
    "describe",
    "fit",
    "checkpoint_resume",
    "ddp_fit",
    "collectives",
    "precision[64-true]",
    "precision[32-true]",
    "precision[16-mixed]",
    "precision[bf16-mixed]",
    "precision[16-true]",
    "precision[bf16-true]",
    "precision[declared]",
)


def skip_training(kind: str, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """``skip=`` for :func:`torchplug.testing.verify`: the training checks of ``kind``, except ``keep``."""
    from torchplug.testing import check_names

    return {n: "not what this test is about" for n in check_names(kind) if n in TRAINING and n not in keep}


@pytest.fixture
def broken_host(new_host: Callable[..., PluginHost]) -> PluginHost:
    """The core's built-ins and the faulty plugins, nothing else."""
    return new_host(autoload=False, requested=(BROKEN_PLUGIN,))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a ``core`` command run by a test: the repository importable, autoload off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    env.update(PYTHONPATH=str(REPO_ROOT), TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1", **extra)
    return env
