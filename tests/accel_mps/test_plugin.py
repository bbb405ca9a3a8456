"""accel-mps registers ``mps``; on this Linux machine it is listed as unavailable, with the reason, without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import torchplug
from torchplug._host import PluginHost
from torchplug._settings import PluginSettings

LINUX_REASON = (
    "MPS is Apple's Metal GPU backend, only on macOS (this is Linux): torch.backends.mps.is_available() is False "
    "here. Hint: use accelerator='cpu' (or 'cuda' with accel-cuda on an NVIDIA machine)."
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="checks the answers given on Linux")


def _core(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    env["TORCHPLUG_BLOCK_PLUGINS"] = "cuda,tpu,ipu,hpu,slurm,xla_io"  # whatever else this env has installed
    return subprocess.run(
        [sys.executable, "-m", "torchplug", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _entry(listing: str) -> dict[str, object]:
    return next(e for e in json.loads(listing)["entries"] if e["name"] == "mps")


def test_listed_as_unavailable_on_linux_without_importing_torch() -> None:
    code = (
        "import runpy, sys; sys.argv = ['core', 'plugins', 'list', '--json']\n"
        "try:\n    runpy.run_module('torchplug', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-FREE', file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)

    assert "TORCH-FREE" in result.stderr, result.stderr
    entry = _entry(result.stdout)
    assert entry["status"] == "unavailable"
    assert entry["reason"] == LINUX_REASON
    assert entry["provider"]["distribution"] == "accel-mps"  # type: ignore[index]


def test_check_asks_the_class_and_gives_the_same_reason() -> None:
    result = _core("plugins", "list", "--kind", "accelerator", "--check", "--json")

    entry = _entry(result.stdout)
    assert entry["status"] == "unavailable"
    assert entry["reason"] == LINUX_REASON
    assert entry["check"]["imported"] is True  # type: ignore[index]


def test_asking_for_it_raises_the_reason() -> None:
    with pytest.raises(torchplug.PluginUnavailableError) as info:
        torchplug.Trainer(accelerator="mps")
    assert str(info.value).endswith(f"is installed but cannot run on this machine: {LINUX_REASON}")


def test_without_the_package_the_name_says_what_to_install() -> None:
    core_only = PluginHost(PluginSettings(autoload=False))
    with pytest.raises(torchplug.UnknownPluginError, match="Hint: pip install accel-mps"):
        torchplug.Trainer(accelerator="mps", plugin_host=core_only)


def test_the_environment_report_says_why() -> None:
    from torchplug_mps._vendor import environment_report

    report = environment_report()
    assert report["available"] is False
    assert report["reason"] == LINUX_REASON
    assert report["is_built"] is False  # the Linux torch has no MPS


def test_importing_the_package_imports_no_torch() -> None:
    code = "import sys, torchplug_mps; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
