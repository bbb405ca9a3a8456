"""CUDAAccelerator: its answers to the core, why it is unavailable, and its per-process work, with torch.cuda faked."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.accel_cuda.conftest import FakeGPUs
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug_cuda import CUDAAccelerator, _vendor

CORE_PRECISIONS = ["64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]


# -- the answers the core asks for ------------------------------------------------------------


def test_the_core_asks_the_accelerator_and_gets_cuda_answers() -> None:
    assert CUDAAccelerator.name == "cuda"
    assert CUDAAccelerator.auto_priority == 50 > CPUAccelerator.auto_priority
    assert CUDAAccelerator.device_type == "cuda"
    assert CUDAAccelerator.autocast_device_type == "cuda"
    assert CUDAAccelerator.process_group_backend == "nccl"
    assert CUDAAccelerator.default_precision == "32-true"
    assert CUDAAccelerator.default_checkpoint_io is None


def test_deterministic_setup_asks_cublas_for_a_fixed_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    CUDAAccelerator().deterministic_setup()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    CUDAAccelerator().deterministic_setup()  # twice is harmless
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_deterministic_setup_keeps_the_users_cublas_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    CUDAAccelerator().deterministic_setup()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.parametrize("precision", CORE_PRECISIONS)
def test_every_core_precision_is_supported(precision: str) -> None:
    accelerator = CUDAAccelerator()
    assert accelerator.supports_precision(precision)
    assert accelerator.precision_for(precision) == precision


@pytest.mark.parametrize(
    ("devices", "nodes", "interactive", "strategy"),
    [
        (1, 1, False, "single_device"),
        (2, 1, False, "ddp"),
        (2, 1, True, "ddp_fork"),
        (1, 2, False, "ddp"),
    ],
)
def test_default_strategy(devices: int, nodes: int, interactive: bool, strategy: str) -> None:
    assert CUDAAccelerator().default_strategy(devices, nodes, interactive) == strategy


@pytest.mark.parametrize(("preset", "expected"), [(None, "1"), ("0", "0")], ids=["unset", "opted-out"])
def test_loading_the_accelerator_makes_torchs_own_availability_check_fork_safe(
    preset: str | None, expected: str
) -> None:
    # torch.cuda.is_available(), which GradScaler("cuda") calls in the parent process, then asks NVML.
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    if preset is not None:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = preset
    code = "import os, torchplug_cuda.accelerator; print(os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert result.stdout.strip() == expected


# -- availability -----------------------------------------------------------------------------


def test_available_with_gpus(fake_gpus: FakeGPUs) -> None:
    fake_gpus(3)
    assert CUDAAccelerator.is_available()
    assert CUDAAccelerator.unavailable_reason() is None
    assert CUDAAccelerator.auto_device_count() == 3


def test_this_machine_has_a_cpu_build_of_torch() -> None:
    assert not CUDAAccelerator.is_available()
    assert CUDAAccelerator.unavailable_reason() == (
        f"torch was built without CUDA (torch {torch.__version__}). Hint: install a CUDA build of torch "
        "(https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
    )
    assert CUDAAccelerator.auto_device_count() == 0


@pytest.fixture
def cuda_build_without_gpus(fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A CUDA build of torch that counts no GPU, on Linux with the driver loaded (its /proc file is returned)."""
    fake_gpus(0)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.version, "hip", None)
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n")
    monkeypatch.setattr(_vendor, "DRIVER_VERSION_FILE", str(driver))
    return driver


def test_hidden_by_cuda_visible_devices(cuda_build_without_gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert CUDAAccelerator.unavailable_reason() == (
        "CUDA_VISIBLE_DEVICES='' hides every GPU (it is empty). Hint: unset CUDA_VISIBLE_DEVICES, or list the GPUs to "
        "use, e.g. CUDA_VISIBLE_DEVICES=0,1."
    )


def test_no_driver(cuda_build_without_gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_build_without_gpus.unlink()
    monkeypatch.setattr("ctypes.util.find_library", lambda name: None)
    assert CUDAAccelerator.unavailable_reason().startswith(
        f"no NVIDIA driver found (neither {cuda_build_without_gpus} nor libnvidia-ml (NVML) is present)."
    )


def test_visible_devices_that_do_not_exist(cuda_build_without_gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert CUDAAccelerator.unavailable_reason() == (
        "none of the GPUs that CUDA_VISIBLE_DEVICES='7' names exists. Hint: nvidia-smi -L lists the GPUs with their "
        "ids and UUIDs."
    )


def test_a_driver_that_reports_no_gpu(cuda_build_without_gpus: Path) -> None:
    assert CUDAAccelerator.unavailable_reason() == (
        "the NVIDIA driver is loaded but reports no GPU. Hint: nvidia-smi shows what the driver sees; inside a "
        "container, start it with GPUs (docker run --gpus all)."
    )


def test_a_rocm_build_without_gpus(cuda_build_without_gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "hip", "6.3.0")
    assert CUDAAccelerator.unavailable_reason().startswith(
        f"torch {torch.__version__} (a ROCm build) finds no AMD GPU. Hint: rocm-smi"
    )


# -- devices ----------------------------------------------------------------------------------


def test_parsed_ids_become_cuda_devices(fake_gpus: FakeGPUs) -> None:
    fake_gpus(4)
    ids = CUDAAccelerator.parse_devices("1,3")
    assert ids == [1, 3]
    assert CUDAAccelerator.get_parallel_devices(ids) == [torch.device("cuda", 1), torch.device("cuda", 3)]


def test_setup_device_selects_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    selected: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    CUDAAccelerator().setup_device(torch.device("cuda", 1))
    assert selected == [torch.device("cuda", 1)]


def test_setup_device_refuses_another_device_type() -> None:
    with pytest.raises(ValueError, match=r"The cuda accelerator cannot run on device 'cpu'; expected 'cuda:<id>'\."):
        CUDAAccelerator().setup_device(torch.device("cpu"))


def test_teardown_empties_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    CUDAAccelerator().teardown()
    assert calls == ["empty_cache"]


# -- random state -----------------------------------------------------------------------------


def test_no_rng_state_before_cuda_is_used() -> None:
    assert CUDAAccelerator().get_rng_state() is None


@pytest.fixture
def cuda_generators(fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch) -> dict[int, torch.Tensor]:
    """Two GPUs whose generator states live in a dict (torch.cuda's get/set_rng_state faked)."""
    fake_gpus(2)
    states = {0: torch.arange(16, dtype=torch.uint8), 1: torch.arange(16, 32, dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [states[0].clone(), states[1].clone()])
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: states.__setitem__(device, state.clone()))
    return states


def test_rng_state_round_trips_through_a_weights_only_checkpoint(cuda_generators: dict[int, torch.Tensor]) -> None:
    accelerator = CUDAAccelerator()
    saved = accelerator.get_rng_state()
    buffer = io.BytesIO()
    torch.save({"rng": saved}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["rng"]
    cuda_generators[0].zero_()
    cuda_generators[1] = torch.zeros(16, dtype=torch.uint8)
    accelerator.set_rng_state(loaded)
    assert torch.equal(cuda_generators[0], torch.arange(16, dtype=torch.uint8))
    assert torch.equal(cuda_generators[1], torch.arange(16, 32, dtype=torch.uint8))


def test_rng_state_from_more_gpus_restores_the_first_ones(cuda_generators: dict[int, torch.Tensor]) -> None:
    states = [torch.full((16,), i, dtype=torch.uint8) for i in range(4)]
    with pytest.warns(
        UserWarning,
        match=r"holds the random states of 4 GPU\(s\) and this process sees 2; restored "
        r"the first 2\.",
    ):
        CUDAAccelerator().set_rng_state({"cuda": states})
    assert [int(cuda_generators[i][0]) for i in (0, 1)] == [0, 1]


@pytest.mark.parametrize("state", [[torch.zeros(4)], {"xla": 1}, 7], ids=["list", "other-key", "int"])
def test_a_foreign_rng_state_is_ignored_with_a_warning(cuda_generators: dict[int, torch.Tensor], state: Any) -> None:
    with pytest.warns(UserWarning, match="is not a CUDA one"):
        CUDAAccelerator().set_rng_state(state)
    assert torch.equal(cuda_generators[0], torch.arange(16, dtype=torch.uint8))


def test_no_rng_state_restores_nothing(cuda_generators: dict[int, torch.Tensor]) -> None:
    CUDAAccelerator().set_rng_state(None)
    assert torch.equal(cuda_generators[1], torch.arange(16, 32, dtype=torch.uint8))


# -- device statistics ------------------------------------------------------------------------


@pytest.fixture
def gpu_memory(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """torch.cuda's memory functions report fixed numbers; returns the devices they were asked about."""
    asked: list[Any] = []

    def reporting(value: Any) -> Any:
        def read(device: Any = None) -> Any:
            asked.append(device)
            return value

        return read

    monkeypatch.setattr(torch.cuda, "memory_allocated", reporting(1000))
    monkeypatch.setattr(torch.cuda, "memory_reserved", reporting(4000))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", reporting(3000))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", reporting(6000))
    monkeypatch.setattr(torch.cuda, "mem_get_info", reporting((70_000, 80_000)))
    monkeypatch.setattr(torch.cuda, "memory_stats", reporting({"num_alloc_retries": 2, "num_ooms": 0}))
    return asked


MEMORY = {
    "memory_allocated_bytes": 1000,
    "memory_reserved_bytes": 4000,
    "memory_peak_allocated_bytes": 3000,
    "memory_peak_reserved_bytes": 6000,
    "memory_free_bytes": 70_000,
    "memory_total_bytes": 80_000,
    "alloc_retries": 2,
    "ooms": 0,
}


def test_device_stats_without_nvidia_ml_py_are_the_memory(
    gpu_memory: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pynvml(device: Any = None) -> int:
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed or it can't be imported.")

    for gauge in ("utilization", "temperature", "power_draw"):
        monkeypatch.setattr(torch.cuda, gauge, no_pynvml)
    device = torch.device("cuda", 1)
    assert CUDAAccelerator().get_device_stats(device) == MEMORY
    assert set(gpu_memory) == {device}


def test_device_stats_add_the_nvml_gauges_each_board_has(
    gpu_memory: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(device: Any = None) -> int:
        raise RuntimeError("NVML: Not Supported")

    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 87)
    monkeypatch.setattr(torch.cuda, "temperature", unsupported)
    monkeypatch.setattr(torch.cuda, "power_draw", lambda device=None: 312_000)
    stats = CUDAAccelerator().get_device_stats(torch.device("cuda", 0))
    assert stats == {**MEMORY, "utilization_percent": 87, "power_draw_milliwatts": 312_000}


# -- the environment report -------------------------------------------------------------------


def test_environment_report_on_this_machine() -> None:
    from torchplug_cuda._vendor import environment_report

    report = environment_report()
    assert report["available"] is False
    assert report["reason"].startswith("torch was built without CUDA")
    assert report["torch"] == torch.__version__
    assert report["torch_cuda"] is None
    assert report["devices"] == []
    assert set(report) == {
        "available",
        "reason",
        "torch",
        "torch_cuda",
        "cudnn",
        "nccl",
        "driver",
        "driver_cuda",
        "CUDA_VISIBLE_DEVICES",
        "devices",
    }


def test_environment_report_lists_each_gpu(
    cuda_build_without_gpus: Path, fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchplug_cuda._vendor import environment_report

    fake_gpus(2)
    h100 = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=85_000_000_000, multi_processor_count=132
    )

    def properties(index: int) -> SimpleNamespace:
        if index == 1:
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
        return h100

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    report = environment_report()
    assert report["available"] is True and report["reason"] is None
    assert report["driver"] == "550.54.15"
    assert report["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert report["devices"] == [
        {
            "id": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "capability": "9.0",
            "memory_total_bytes": 85_000_000_000,
            "multiprocessors": 132,
        },
        {"id": 1, "error": "RuntimeError: CUDA error: uncorrectable ECC error encountered"},
    ]


@pytest.mark.parametrize("enabled", [True, False])
def test_benchmark_sets_cudnns_flag(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not enabled)
    assert CUDAAccelerator().set_benchmark(enabled) is True
    assert torch.backends.cudnn.benchmark is enabled
