"""The torch-free probe behind ``core plugins list``: torch's build, CUDA_VISIBLE_DEVICES, and the driver."""

from __future__ import annotations

import ctypes.util
import importlib.metadata
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from torchplug_cuda import _vendor

SetVersion = Callable[[str | None], None]


@pytest.fixture
def torch_version(monkeypatch: pytest.MonkeyPatch) -> SetVersion:
    """Make the installed torch's metadata report another version (None: torch not installed)."""
    real = importlib.metadata.version

    def install(version: str | None) -> None:
        def fake(name: str) -> str:
            if name != "torch":
                return real(name)
            if version is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return version

        monkeypatch.setattr(importlib.metadata, "version", fake)

    return install


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A Linux machine with neither the driver's /proc file nor NVML; returns the libraries looked up."""
    looked_up: list[str] = []
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(_vendor, "DRIVER_VERSION_FILE", str(tmp_path / "proc-driver-nvidia-version"))
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: looked_up.append(name))
    return looked_up


# -- torch's build ----------------------------------------------------------------------------


def test_this_machines_cpu_build_of_torch_is_recognised_from_its_metadata() -> None:
    assert _vendor.torch_build_reason() == (
        f"torch was built without CUDA (torch {torch.__version__}). Hint: install a CUDA build of torch "
        "(https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
    )
    assert _vendor.probe() == _vendor.torch_build_reason()


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.6.0+cpu.cxx11.abi", "2.7.1+CPU"])
def test_a_cpu_local_version_means_no_cuda(torch_version: SetVersion, version: str) -> None:
    torch_version(version)
    assert _vendor.torch_build_reason().startswith(f"torch was built without CUDA (torch {version}).")


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cu128", "2.6.0+cu126", "2.7.0+rocm6.3"])
def test_cuda_and_default_builds_pass(torch_version: SetVersion, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    torch_version(version)
    assert _vendor.torch_build_reason() is None


def test_torch_missing_is_said(torch_version: SetVersion) -> None:
    torch_version(None)
    assert _vendor.torch_build_reason().startswith("torch is not installed. Hint: install a CUDA build of torch")


def test_macos_has_no_cuda(torch_version: SetVersion, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_version("2.13.0")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _vendor.torch_build_reason() == (
        "torch has no CUDA on macOS (torch 2.13.0). Hint: use accelerator='mps' or 'cpu'."
    )


# -- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------

VISIBLE_VALUES = [
    "0",
    "0,1",
    " 1 , 3 ",
    "4,5",
    "1,",
    "0,,1",
    "2,x,3",
    "1gpu,2",
    "+1",
    "01,1",
    "0,0",
    "1,0,1",
    "",
    "-1",
    "0,-1,1",
    "abc",
    "GPU-1234,GPU-5678",
    "MIG-abcd",
    "GPU-1,GPU-1",
]


@pytest.mark.parametrize("value", VISIBLE_VALUES)
def test_visible_entries_read_the_variable_as_torch_does(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert _vendor.visible_entries(value) == [str(entry) for entry in torch.cuda._parse_visible_devices()]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "it is empty"),
        ("-1", "a negative id ends the list"),
        ("0,0", "it names a GPU twice, which CUDA reads as no GPU at all"),
        ("1,01", "it names a GPU twice, which CUDA reads as no GPU at all"),
        ("none", "it does not start with a GPU id or UUID"),
    ],
    ids=["empty", "minus-one", "repeated", "repeated-padded", "garbage"],
)
def test_a_variable_that_hides_every_gpu_is_explained(monkeypatch: pytest.MonkeyPatch, value: str, why: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert _vendor.hidden_reason() == (
        f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU ({why}). "
        "Hint: unset CUDA_VISIBLE_DEVICES, or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0,1."
    )


@pytest.mark.parametrize("value", [None, "0", "3,1", "GPU-8e1a", "1,"])
def test_a_variable_that_selects_gpus_passes(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert _vendor.hidden_reason() is None


# -- the driver -------------------------------------------------------------------------------


def test_no_driver_file_and_no_nvml_means_no_driver(no_driver: list[str], tmp_path: Path) -> None:
    assert _vendor.driver_reason() == (
        f"no NVIDIA driver found (neither {tmp_path / 'proc-driver-nvidia-version'} nor libnvidia-ml (NVML) is "
        "present). Hint: install the NVIDIA driver (nvidia-smi should list your GPUs); inside a container, start it "
        "with GPUs (docker run --gpus all); or use accelerator='cpu'."
    )
    assert no_driver == ["nvidia-ml"]


def test_the_driver_file_is_enough_and_the_linker_cache_is_not_asked(no_driver: list[str], tmp_path: Path) -> None:
    (tmp_path / "proc-driver-nvidia-version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    assert _vendor.driver_reason() is None
    assert no_driver == []


def test_nvml_in_the_linker_cache_is_enough(no_driver: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # WSL2 and some containers have the library but no /proc/driver/nvidia.
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libnvidia-ml.so.1")
    assert _vendor.driver_reason() is None


def test_windows_looks_for_nvml_dll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert "nvml.dll (NVML) is not on PATH" in _vendor.driver_reason()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "C:\\Windows\\System32\\nvml.dll")
    assert _vendor.driver_reason() is None


def test_a_rocm_build_needs_no_nvidia_driver(no_driver: list[str], torch_version: SetVersion) -> None:
    torch_version("2.7.0+rocm6.3")
    assert _vendor.driver_reason() is None


# -- the probe as a whole ---------------------------------------------------------------------


def test_the_probe_reports_the_first_reason_in_order(
    torch_version: SetVersion, no_driver: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch_version("2.13.0+cu128")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _vendor.probe().startswith("CUDA_VISIBLE_DEVICES='' hides every GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _vendor.probe().startswith("no NVIDIA driver found")


def test_the_probe_imports_no_torch() -> None:
    code = (
        "import sys; import torchplug_cuda._vendor as p; print(repr(p.probe())); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    reason, modules = result.stdout.splitlines()
    assert "torch was built without CUDA" in reason
    assert modules == "[]"
