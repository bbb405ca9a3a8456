"""Fixtures for the conformance suite's own tests: plugin hosts holding the faulty plugins of broken.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.plugin_site_support import plugin_site
from torchplug._host import PluginHost

#: The plugin module registering every faulty plugin, installed as the distribution ``torchplug-test-broken``
#: (see :func:`tests.plugin_site_support.plugin_site`) so that TORCHPLUG_PLUGINS can name it.
BROKEN_PLUGIN = "tests.core.testing.broken_plugin"
BROKEN_SITE = plugin_site("torchplug-test-broken", BROKEN_PLUGIN)
#: A plugin module that imports torch and a vendor library at listing (torchplug-test-heavy).
HEAVY_SITE = plugin_site("torchplug-test-heavy", "tests.core.testing.heavy_plugin")
#: A plugin module registering a name of BROKEN_PLUGIN's under another kind (torchplug-test-twin).
TWIN_SITE = plugin_site("torchplug-test-twin", "tests.core.testing.twin_plugin")
FAKE_VENDOR = Path(__file__).parent / "fake_vendor"
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _broken_plugin_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The faulty plugins' distribution on ``sys.path`` (a child process gets it through :func:`child_env`)."""
    monkeypatch.syspath_prepend(str(BROKEN_SITE))


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


def child_env(*sites: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``core`` command run by a test: the repository and the faulty plugins importable
    (and the plugin ``sites`` given), autoload off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    env.update(
        PYTHONPATH=os.pathsep.join(map(str, [REPO_ROOT, BROKEN_SITE, *sites])),
        TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD="1",
        OMP_NUM_THREADS="1",
        **extra,
    )
    return env
