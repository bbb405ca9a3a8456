"""torchplug's conformance suite against accel-cuda's ``cuda`` accelerator.

On this machine as it is (no GPU on a CPU build of torch, or real GPUs), every check runs that can:
without a GPU, those that need one are skipped with the reason. On a machine faked to have two
GPUs (a CUDA build's metadata, the driver's file, ``torch.cuda.device_count()``: what the other
tests fake), the checks of the ``devices=`` contract run; the checks that compute are skipped
there, since fake GPUs cannot run kernels.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import torch

from torchplug.testing import AcceleratorSuite
from torchplug_cuda import _vendor

#: Why the fake GPUs cannot run the checks that compute.
_FAKE = "the fake GPUs exist only as torch.cuda.device_count(); computing needs real ones (TestCUDAConformance)"


class TestCUDAConformance(AcceleratorSuite):
    plugin = "cuda"


class TestCUDAOnFakeGPUCount(AcceleratorSuite):
    plugin = "cuda"
    skipped_checks = dict.fromkeys(
        (
            "device",
            "rng_state",
            "fit",
            "precision[64-true]",
            "precision[32-true]",
            "precision[16-mixed]",
            "precision[bf16-mixed]",
            "precision[16-true]",
            "precision[bf16-true]",
            "checkpoint_resume",
            "ddp_fit",
            "collectives",
        ),
        _FAKE,
    )

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        real_version = importlib.metadata.version
        driver = tmp_path / "proc-driver-nvidia-version"
        driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.00\n")
        monkeypatch.setattr(
            importlib.metadata, "version", lambda name: "2.13.0+cu128" if name == "torch" else real_version(name)
        )
        monkeypatch.setattr(_vendor, "DRIVER_VERSION_FILE", str(driver))
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
