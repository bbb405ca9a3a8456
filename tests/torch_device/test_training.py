"""The Trainer on ``tpdev`` with no plugin for it: "auto" picks it, it trains there, resumes exactly, autocasts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.device_ext_support import DeviceSite
from tests.torch_device.conftest import run_scenario

pytestmark = pytest.mark.slow


def test_auto_trains_on_the_device_torch_reports(testdevice_site: DeviceSite, tmp_path: Path) -> None:
    (report,) = run_scenario(testdevice_site, tmp_path, "auto_fit")

    assert report["accelerator"] == "TorchDeviceAccelerator(device_type='tpdev')"
    assert report["strategy"] == "SingleDeviceStrategy"
    assert report["root_device"] == "tpdev:0"
    assert report["parameter_devices"] == ["tpdev:0"]  # seen in on_fit_start and in every training_step
    assert report["batch_devices"] == ["tpdev:0"]
    assert report["val_acc"] > 0.9
    assert report["stats"]["memory_allocated_bytes"] > 0  # asked of torch.accelerator
    assert report["stats"]["memory_peak_allocated_bytes"] >= report["stats"]["memory_allocated_bytes"]
    assert report["warnings"] == []  # the CPU losing on priority is no fallback


def test_describe_names_the_device_type_and_every_candidate(testdevice_site: DeviceSite, tmp_path: Path) -> None:
    (report,) = run_scenario(testdevice_site, tmp_path, "auto_fit")
    text = report["describe"]

    assert re.search(
        r"^accelerator\s+torch\s+\(accelerator='auto': highest priority available \(10\); also available: cpu \(0\); "
        r"from core [\d.]+, built-in, serving torch's device type 'tpdev'\)$",
        text,
        re.M,
    ), text
    assert re.search(r"^\s+- cpu \(core [\d.]+, built-in\): lost, priority 0 < 10$", text, re.M), text
    assert re.search(r"^devices\s+tpdev:0\s+\(devices=1\)$", text, re.M), text


def test_a_checkpoint_resumes_to_exactly_the_weights_of_an_uninterrupted_run(
    testdevice_site: DeviceSite, tmp_path: Path
) -> None:
    (report,) = run_scenario(testdevice_site, tmp_path, "resume")

    assert report["epochs"] == 4
    assert report["resumed"] == report["straight"]  # dropout too: tpdev's generator state was restored
    assert report["rng_device_type"] == "tpdev"
    assert report["rng_states"] == 2  # one generator per tpdev device
    assert report["parameter_devices"] == ["tpdev:0"]


@pytest.mark.parametrize(
    ("precision", "dtype", "scaler"),
    [("bf16-mixed", "bfloat16", None), ("16-mixed", "float16", "tpdev")],
)
def test_mixed_precision_autocasts_on_the_device(
    testdevice_site: DeviceSite, tmp_path: Path, precision: str, dtype: str, scaler: str | None
) -> None:
    (report,) = run_scenario(testdevice_site, tmp_path, "autocast", precision)

    assert report["precision"] == "MixedPrecision"
    assert report["autocast_device_type"] == "tpdev"  # torch.amp.is_autocast_available("tpdev")
    assert report["matmul_dtypes"] == [dtype]  # a matmul inside training_step ran in 16 bits
    assert report["weights_dtype"] == "torch.float32"
    assert report["scaler_device"] == scaler
    assert report["parameter_devices"] == ["tpdev:0"]
