"""accel-cuda as installed: its registration, the listing, ``core env``, and the Trainer choosing (or refusing) it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_cuda.conftest import FakeGPUs
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.precision.amp import MixedPrecision
from torchplug.strategies.ddp import DDPStrategy
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug_cuda import CUDAAccelerator, _vendor

NO_CUDA_BUILD = (
    f"torch was built without CUDA (torch {torch.__version__}). Hint: install a CUDA build of torch "
    "(https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
)
PROVIDER = {"plugin": "cuda", "distribution": "accel-cuda", "version": "0.1.0", "builtin": False}


def quiet(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    return {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "default_root_dir": tmp_path,
        **kwargs,
    }


# -- registration -----------------------------------------------------------------------------


def test_gpu_is_an_alias_of_cuda_from_accel_cuda() -> None:
    registry = torchplug.AcceleratorRegistry
    entry = registry.resolve("gpu")
    assert entry is registry.resolve("cuda") is registry.resolve("cuda@accel-cuda")
    assert entry.name == "cuda" and entry.aliases == ("gpu",)
    assert entry.provider.distribution == "accel-cuda" and entry.provider.version == "0.1.0"
    assert str(entry.provider) == "accel-cuda 0.1.0"
    assert entry.target_path == "torchplug_cuda.accelerator:CUDAAccelerator"
    assert entry.provider.version == importlib.metadata.version("accel-cuda")


def test_get_gpu_builds_a_cuda_accelerator_where_gpus_exist(fake_gpus: FakeGPUs) -> None:
    fake_gpus(1)
    assert isinstance(torchplug.AcceleratorRegistry.get("gpu"), CUDAAccelerator)


def test_get_gpu_here_raises_with_the_reason() -> None:
    with pytest.raises(torchplug.PluginUnavailableError) as error:
        torchplug.AcceleratorRegistry.get("gpu")
    assert str(error.value) == (
        f"Accelerator 'cuda' from accel-cuda 0.1.0 is installed but cannot run on this machine: {NO_CUDA_BUILD}"
    )
    assert isinstance(torchplug.AcceleratorRegistry.get("gpu", check_available=False), CUDAAccelerator)


def test_the_package_version_comes_from_its_metadata() -> None:
    import torchplug_cuda

    assert torchplug_cuda.__version__ == "0.1.0"


# -- the listing, without torch ---------------------------------------------------------------

LIST_AND_CHECK_MODULES = """
import json, sys
from torchplug.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchplug_cuda'))
print(json.dumps({"exit_code": code, "modules": loaded}))
"""


def run_listing(*args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``core plugins list ARGS`` in a fresh interpreter: the JSON document, and what the process imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    result = subprocess.run(
        [sys.executable, "-c", LIST_AND_CHECK_MODULES, "plugins", "list", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    document, _, trailer = result.stdout.rstrip().rpartition("\n")
    return json.loads(document), json.loads(trailer)


def test_the_listing_shows_cuda_unavailable_with_the_reason_without_importing_torch() -> None:
    listing, process = run_listing("--kind", "accelerator")
    assert process["exit_code"] == 0
    assert process["modules"] == ["torchplug_cuda", "torchplug_cuda._plugin", "torchplug_cuda._vendor"]
    cuda = next(e for e in listing["entries"] if e["name"] == "cuda")
    assert cuda == {
        "kind": "accelerator",
        "name": "cuda",
        "aliases": ["gpu"],
        "target": "torchplug_cuda.accelerator:CUDAAccelerator",
        "description": "NVIDIA GPUs; devices=N, [ids], '0,2' or -1; NCCL between processes",
        "init_params": {},
        "provider": PROVIDER,
        "status": "unavailable",
        "reason": NO_CUDA_BUILD,
    }
    plugin = next(p for p in listing["plugins"] if p["distribution"] == "accel-cuda")
    assert plugin["state"] == "ok" and plugin["name"] == "cuda"


def test_the_check_imports_the_class_and_agrees() -> None:
    listing, process = run_listing("--kind", "accelerator", "--check")
    assert "torchplug_cuda.accelerator" in process["modules"]
    cuda = next(e for e in listing["entries"] if e["name"] == "cuda")
    assert cuda["status"] == "unavailable" and cuda["reason"] == NO_CUDA_BUILD
    assert cuda["check"]["imported"] is True and cuda["check"]["available"] is False


def test_the_environment_report_hook_answers_for_core_env() -> None:
    results = torchplug.plugin_host().call_each("torchplug_environment_report")
    _, report, error = next(r for r in results if r[0].distribution == "accel-cuda")
    assert error is None
    assert report["available"] is False and report["reason"] == NO_CUDA_BUILD
    assert report["devices"] == []
    json.dumps(report)  # JSON-ready, as the hook spec asks


# -- the Trainer ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cuda", "gpu"])
def test_trainer_refuses_cuda_here_naming_the_reason(name: str, tmp_path: Path) -> None:
    with pytest.raises(torchplug.PluginUnavailableError) as error:
        torchplug.Trainer(**quiet(tmp_path, accelerator=name))
    assert str(error.value).endswith(f"cannot run on this machine: {NO_CUDA_BUILD}")


def test_auto_still_picks_the_cpu_here(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(**quiet(tmp_path))
    assert isinstance(trainer.strategy.accelerator, CPUAccelerator)
    accelerator = next(line for line in trainer.describe().splitlines() if line.startswith("accelerator"))
    assert "skipped: " in accelerator and "cuda: unavailable" in accelerator


def test_auto_picks_cuda_where_a_gpu_is_visible(
    fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "2.13.0+cu128" if name == "torch" else real_version(name)
    )
    (tmp_path / "nvidia-version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    monkeypatch.setattr(_vendor, "DRIVER_VERSION_FILE", str(tmp_path / "nvidia-version"))
    monkeypatch.setattr(sys, "platform", "linux")
    fake_gpus(2)
    trainer = torchplug.Trainer(**quiet(tmp_path, devices=1))
    assert isinstance(trainer.strategy.accelerator, CUDAAccelerator)
    assert trainer.strategy.root_device == torch.device("cuda", 0)
    assert "highest priority available (50); also available: cpu (0)" in trainer.describe()


def test_two_gpus_mean_ddp_over_nccl(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus(2)
    trainer = torchplug.Trainer(**quiet(tmp_path, accelerator="cuda", devices=-1))
    strategy = trainer.strategy
    assert isinstance(strategy, DDPStrategy)
    assert strategy.parallel_devices == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert (strategy.process_group_backend or strategy.accelerator.process_group_backend) == "nccl"
    assert type(strategy.precision).__name__ == "Precision"  # 32-true, the accelerator's default


def test_gpu_alias_with_an_id_list_and_16_mixed_scales_on_cuda(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # this CPU build's GradScaler("cuda") warns that it disables itself
        trainer = torchplug.Trainer(**quiet(tmp_path, accelerator="gpu", devices="1,", precision="16-mixed"))
    assert isinstance(trainer.strategy, SingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("cuda", 1)
    precision = trainer.strategy.precision
    assert isinstance(precision, MixedPrecision)
    assert precision.device_type == "cuda"
    assert isinstance(precision.scaler, torch.amp.GradScaler) and precision.scaler._device == "cuda"


def test_bf16_mixed_autocasts_on_cuda_without_a_scaler(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus(1)
    trainer = torchplug.Trainer(**quiet(tmp_path, accelerator="cuda", devices=1, precision="bf16-mixed"))
    precision = trainer.strategy.precision
    assert isinstance(precision, MixedPrecision)
    assert precision.device_type == "cuda" and precision.scaler is None


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ([3], "devices=[3] asks for GPU 3, but only 2 GPUs are visible (ids 0-1)."),
        ([0, 0], "devices=[0, 0] names GPU 0 more than once"),
        (True, "devices=True is a bool"),
    ],
)
def test_trainer_reports_device_errors_in_the_users_words(
    fake_gpus: FakeGPUs, tmp_path: Path, devices: Any, message: str
) -> None:
    fake_gpus(2)
    with pytest.raises(torchplug.MisconfigurationError) as error:
        torchplug.Trainer(**quiet(tmp_path, accelerator="cuda", devices=devices))
    assert message in str(error.value)


def test_an_instance_without_gpus_says_why(tmp_path: Path) -> None:
    # The registry's availability check does not see instances; parsing devices='auto' reports the reason.
    with pytest.raises((torchplug.MisconfigurationError, torchplug.PluginUnavailableError)) as error:
        torchplug.Trainer(**quiet(tmp_path, accelerator=CUDAAccelerator()))
    assert str(error.value).endswith(NO_CUDA_BUILD)
