"""Fixtures for strategy-horovod's tests: horovod really installed (built by tools/build_horovod.py), or hidden.

The tests that train need horovod. Without it they are skipped with the reason, unless
``TORCHPLUG_REQUIRE_HOROVOD=1`` (set by tox's ``strategy_horovod`` environment, which builds
horovod first) turns the skip into a failure.
"""

from __future__ import annotations

import os
import sys

import pytest

from torchplug.utilities.imports import module_available

REQUIRE_VAR = "TORCHPLUG_REQUIRE_HOROVOD"


@pytest.fixture
def horovod_installed() -> None:
    """Skip (or fail, under TORCHPLUG_REQUIRE_HOROVOD=1) where horovod is not installed."""
    if module_available("horovod"):
        return
    message = "horovod is not installed here: build it with `python tools/build_horovod.py`"
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{message} ({REQUIRE_VAR}=1)")
    pytest.skip(message)


@pytest.fixture
def no_horovod(monkeypatch: pytest.MonkeyPatch) -> None:
    """horovod cannot be imported, as when it is not installed."""
    for name in [m for m in sys.modules if m.split(".")[0] == "horovod"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "horovod", None)  # type: ignore[arg-type]
