"""The fake poptorch (``fake_vendor/poptorch``): putting it on the path, and forgetting it afterwards.

The fake stands in for the vendor library at its import boundary only; accel-ipu runs unchanged
against it.
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

#: The reason every IPU plugin gives when poptorch is missing (checked word for word).
NOT_INSTALLED = (
    "poptorch is not installed. Hint: install Graphcore's Poplar SDK (https://www.graphcore.ai/downloads) "
    "and the poptorch wheel it ships: pip install <sdk>/poptorch-*.whl"
)


def forget_poptorch() -> None:
    """Drop every ``poptorch`` module, so the next import starts from a fresh (fake) state."""
    for name in [n for n in sys.modules if n == "poptorch" or n.startswith("poptorch.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def use_fake(monkeypatch: pytest.MonkeyPatch, ipus: int = 4) -> Iterator[ModuleType]:
    """Put the fake on ``sys.path`` with ``ipus`` IPUs, and forget it afterwards."""
    monkeypatch.setenv("FAKE_IPU_COUNT", str(ipus))
    monkeypatch.delenv("FAKE_POPTORCH_NO_AUTOCAST", raising=False)
    forget_poptorch()
    monkeypatch.syspath_prepend(str(FAKE_VENDOR))
    yield importlib.import_module("poptorch")
    forget_poptorch()


def without_poptorch() -> Iterator[None]:
    """The real situation on this machine: poptorch is not installed (skips where it is)."""
    forget_poptorch()
    if importlib.util.find_spec("poptorch") is not None:
        pytest.skip("poptorch is installed here: the missing-library behaviour cannot be observed")
    yield
    forget_poptorch()


def subprocess_env(fake: bool, **extra: str) -> dict[str, str]:
    """An environment for a child Python: the repository (and the fake, if asked) on PYTHONPATH."""
    root = Path(__file__).parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_IPU_", "FAKE_POPTORCH_", "TORCHPLUG_BLOCK"))}
    paths = [str(FAKE_VENDOR)] if fake else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(root)])
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env
