"""The fake habana_frameworks (``fake_vendor/habana_frameworks``): putting it on the path, and forgetting it.

The fake stands in for the vendor library at its import boundary only; accel-hpu runs unchanged
against it. Forgetting it also removes the device mode it installed (``hpu`` meaning the CPU).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

FAKE_VENDOR = Path(__file__).parent / "fake_vendor"

#: The reason every HPU plugin gives when habana_frameworks is missing (checked word for word).
NOT_INSTALLED = (
    "habana_frameworks is not installed. Hint: install Intel Gaudi's PyTorch packages "
    "(habana-torch-plugin, see https://docs.habana.ai/en/latest/Installation_Guide/index.html), or use "
    "Intel's Gaudi PyTorch container"
)

_ENV = ("FAKE_HPU_COUNT", "FAKE_HPU_NAME", "FAKE_HABANA_NO_FP8")

#: The fake's ``hpu``-means-CPU device mode is a TorchFunctionMode, which torch keeps per thread, where
#: the real bridge registers the device for the whole process. torchplug imports a third-party plugin's
#: vendor library in its deadline worker thread (``TORCHPLUG_PLUGIN_TIMEOUT``), which would leave the
#: mode in that thread only; with the fake, plugin calls run inline, in the thread that trains.
FAKE_SETTINGS = {"TORCHPLUG_PLUGIN_TIMEOUT": "0"}


def forget_habana() -> None:
    """Drop every ``habana_frameworks`` module (removing the fake's device mode), so the next import starts afresh."""
    fake = sys.modules.get("habana_frameworks.torch._fake")
    if fake is not None:
        fake.uninstall()
    for name in [n for n in sys.modules if n == "habana_frameworks" or n.startswith("habana_frameworks.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def use_fake(monkeypatch: pytest.MonkeyPatch, hpus: int = 8) -> Iterator[ModuleType]:
    """Put the fake on ``sys.path`` with ``hpus`` Gaudi2 HPUs, and forget it afterwards."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_HPU_COUNT", str(hpus))
    for name, value in FAKE_SETTINGS.items():
        monkeypatch.setenv(name, value)
    forget_habana()
    monkeypatch.syspath_prepend(str(FAKE_VENDOR))
    yield importlib.import_module("habana_frameworks.torch")
    forget_habana()


def without_habana() -> Iterator[None]:
    """The real situation on this machine: habana_frameworks is not installed (skips where it is)."""
    forget_habana()
    if importlib.util.find_spec("habana_frameworks") is not None:
        pytest.skip("habana_frameworks is installed here: the missing-library behaviour cannot be observed")
    yield
    forget_habana()


def subprocess_env(fake: bool, **extra: str) -> dict[str, str]:
    """An environment for a child Python: the repository (and the fake, if asked) on PYTHONPATH.

    Launcher and scheduler variables of an enclosing run are dropped, so the child starts its own ranks.
    """
    root = Path(__file__).parents[2]
    foreign = (
        "LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHPLUG_PARENT_PID",
        "TORCHPLUG_CLUSTER_ENVIRONMENT",
        "SLURM_JOB_ID",
        "SLURM_NTASKS",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "LSB_JOBID",
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in foreign and not k.startswith(("FAKE_HPU", "FAKE_HABANA", "TORCHPLUG_BLOCK", "TORCHELASTIC_"))
    }
    paths = [str(FAKE_VENDOR)] if fake else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(root)])
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **FAKE_SETTINGS)
    env.update(extra)
    return env
