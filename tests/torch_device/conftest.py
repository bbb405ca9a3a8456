"""Fixtures for the generic accelerator's tests on ``tpdev``, a real out-of-tree device (tests/fixtures/device-ext).

No torchplug plugin for ``tpdev`` exists: the core's generic ``torch`` accelerator serves it. The
device is loaded in child interpreters only (see tests/device_ext_support.py); each child runs
with ``TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD=1``, so only the core's built-ins are registered, whatever
else this environment has installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from tests.device_ext_support import DeviceSite, testdevice_site, testdevice_wheel_path  # noqa: F401

SCENARIOS: Final = Path(__file__).with_name("scenarios.py")

#: Two tpdev devices, and the core's built-ins only.
CHILD_ENV: Final = {"TPDEV_DEVICE_COUNT": "2", "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD": "1"}


def run_scenario(site: DeviceSite, out: Path, name: str, *args: str, ranks: int = 1) -> list[dict[str, Any]]:
    """Run ``scenarios.py NAME OUT ARGS`` in a child that has tpdev; return each rank's report."""
    result = site.run(str(SCENARIOS), name, str(out), *args, env=CHILD_ENV)
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    stem = name if not args else f"{name}-{args[0]}"
    return [json.loads((out / f"{stem}-rank{rank}.json").read_text()) for rank in range(ranks)]


@pytest.fixture
def device_python(testdevice_site: DeviceSite) -> Any:  # noqa: F811
    """Run a snippet in a fresh child with tpdev and the core's built-ins; returns its last line, parsed as JSON."""

    def run(code: str, **env: str) -> Any:
        return testdevice_site.python_json(code, env={**CHILD_ENV, **env})

    return run
