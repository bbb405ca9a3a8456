"""Counting GPUs without initialising CUDA, and every form of ``devices=`` with every error it can give."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.accel_cuda.conftest import FakeGPUs
from torchplug import MisconfigurationError
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.trainer.connector import resolve
from torchplug_cuda import is_cuda_available, num_cuda_devices, parse_cuda_devices

CHOICES = "Give a number of GPUs (devices=2), -1 or 'auto' for all of them, or a list of ids (devices=[0, 2] or '0,2')."
NO_CUDA_BUILD = (
    f"torch was built without CUDA (torch {torch.__version__}). Hint: install a CUDA build of torch "
    "(https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
)


# -- counting ---------------------------------------------------------------------------------


@pytest.fixture
def nvml_gpus(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A CUDA build of torch on a machine whose NVML reports 4 GPUs; records any call to the CUDA runtime.

    Only the lowest layer is faked (NVML's raw count and the runtime's count), so torch.cuda's own
    device_count() logic, CUDA_VISIBLE_DEVICES handling included, really runs.
    """
    runtime_calls: list[str] = []

    def runtime_count() -> int:  # cudaGetDeviceCount: initialises the driver and poisons fork
        runtime_calls.append("cudaGetDeviceCount")
        return 4

    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_raw_device_count_nvml", lambda: 4)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", runtime_count, raising=False)
    return runtime_calls


@pytest.mark.parametrize(
    ("visible", "count"),
    [
        (None, 4),
        ("0,1,2,3", 4),
        ("1,3", 2),
        ("3", 1),
        ("2,7", 1),
        ("7", 0),
        ("", 0),
        ("-1", 0),
        ("0,0", 0),
    ],
    ids=["unset", "all", "two", "one", "trimmed", "absent", "empty", "minus-one", "repeated"],
)
def test_counting_asks_nvml_and_never_the_cuda_runtime(
    nvml_gpus: list[str], monkeypatch: pytest.MonkeyPatch, visible: str | None, count: int
) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert num_cuda_devices() == count
    assert nvml_gpus == []
    assert not torch.cuda.is_initialized()


def test_counting_falls_back_to_the_runtime_only_when_nvml_fails(
    nvml_gpus: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # For example with MIG UUIDs in CUDA_VISIBLE_DEVICES, or no NVML library: torch's own fallback.
    monkeypatch.setattr(torch.cuda, "_raw_device_count_nvml", lambda: -1)
    assert num_cuda_devices() == 4
    assert nvml_gpus == ["cudaGetDeviceCount"]


def test_availability_never_calls_torch_cuda_is_available(fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch) -> None:
    def poisons_fork() -> bool:
        raise AssertionError("torch.cuda.is_available() initialises the driver unless PYTORCH_NVML_BASED_CUDA_CHECK=1")

    monkeypatch.setattr(torch.cuda, "is_available", poisons_fork)
    fake_gpus(2)
    assert is_cuda_available()
    fake_gpus(0)
    assert not is_cuda_available()


def test_this_cpu_build_counts_no_gpu() -> None:
    assert num_cuda_devices() == 0
    assert not is_cuda_available()
    assert not torch.cuda.is_initialized()


# -- valid values -----------------------------------------------------------------------------


class Index:
    """An integer-like value, as numpy's integers are (``operator.index`` accepts it)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Index({self.value})"


VALID: list[tuple[Any, list[int]]] = [
    (1, [0]),
    (2, [0, 1]),
    (4, [0, 1, 2, 3]),
    (Index(2), [0, 1]),
    ("2", [0, 1]),
    (" 3 ", [0, 1, 2]),
    (-1, [0, 1, 2, 3]),
    ("-1", [0, 1, 2, 3]),
    ("auto", [0, 1, 2, 3]),
    ("AUTO", [0, 1, 2, 3]),
    ([0, 2], [0, 2]),
    ((1, 3), [1, 3]),
    ([3, 0], [3, 0]),
    (range(2), [0, 1]),
    ([Index(1)], [1]),
    (["0", "2"], [0, 2]),
    ("0,2", [0, 2]),
    ("0, 2", [0, 2]),
    ("0,", [0]),
    ("1,", [1]),
    ("3,1,", [3, 1]),
    ("[0, 2]", [0, 2]),
    ("[1]", [1]),
    ("(2,)", [2]),
    ("[0,1,2,3]", [0, 1, 2, 3]),
]


@pytest.mark.parametrize(("devices", "ids"), VALID, ids=[repr(v) for v, _ in VALID])
def test_valid_values_select_these_gpus(fake_gpus: FakeGPUs, devices: Any, ids: list[int]) -> None:
    fake_gpus(4)
    assert parse_cuda_devices(devices) == ids


def test_a_count_and_an_id_differ(fake_gpus: FakeGPUs) -> None:
    fake_gpus(4)
    assert parse_cuda_devices(1) == parse_cuda_devices("1") == [0]  # one GPU
    assert parse_cuda_devices([1]) == parse_cuda_devices("1,") == parse_cuda_devices("[1]") == [1]  # GPU 1


# -- errors that need no device count ---------------------------------------------------------

TYPE_ERRORS: list[tuple[Any, str]] = [
    (True, f"devices=True is a bool, which says nothing about GPUs. {CHOICES}"),
    (False, f"devices=False is a bool, which says nothing about GPUs. {CHOICES}"),
    (1.5, f"devices=1.5 has type float. {CHOICES}"),
    (None, f"devices=None has type NoneType. {CHOICES}"),
    ({0: 1}, f"devices={{0: 1}} has type dict. {CHOICES}"),
    ([0, 1.0], "devices=[0, 1.0] holds 1.0, which is not a GPU id: ids are ints, as in devices=[0, 2]."),
    ([True], "devices=[True] holds True, which is not a GPU id: ids are ints, as in devices=[0, 2]."),
    ("0,x", "devices='0,x' holds 'x', which is not a GPU id: ids are ints, as in devices=[0, 2]."),
]


@pytest.mark.parametrize(("devices", "message"), TYPE_ERRORS, ids=[repr(v) for v, _ in TYPE_ERRORS])
def test_values_of_the_wrong_type_are_refused(fake_gpus: FakeGPUs, devices: Any, message: str) -> None:
    fake_gpus(4)
    with pytest.raises(TypeError) as error:
        parse_cuda_devices(devices)
    assert str(error.value) == message


VALUE_ERRORS: list[tuple[Any, str]] = [
    (
        0,
        "devices=0 selects no GPU. Give a number of GPUs (devices=1), -1 for all of them, or a list of ids "
        "(devices=[0]); to train without a GPU, use accelerator='cpu'.",
    ),
    (
        "0",
        "devices='0' selects no GPU. Give a number of GPUs (devices=1), -1 for all of them, or a list of ids "
        "(devices=[0]); to train without a GPU, use accelerator='cpu'.",
    ),
    ([], f"devices=[] lists no GPU id. {CHOICES}"),
    ("[]", f"devices='[]' lists no GPU id. {CHOICES}"),
    (",", f"devices=',' lists no GPU id. {CHOICES}"),
    (-2, f"devices=-2 is negative. {CHOICES}"),
    ("-3", f"devices='-3' is negative. {CHOICES}"),
    (
        [0, -1],
        "devices=[0, -1] holds the negative id -1. GPU ids count from 0; -1 means every GPU only as the whole "
        "value (devices=-1).",
    ),
    (
        "-1,0",
        "devices='-1,0' holds the negative id -1. GPU ids count from 0; -1 means every GPU only as the whole "
        "value (devices=-1).",
    ),
    (
        [0, 0],
        "devices=[0, 0] names GPU 0 more than once, but each GPU runs one process. Hint: list each id once, "
        "as in devices=[0].",
    ),
    (
        "1,1,2,2",
        "devices='1,1,2,2' names GPUs 1, 2 more than once, but each GPU runs one process. Hint: list each "
        "id once, as in devices=[1, 2].",
    ),
    ("gpu0", f"devices='gpu0' is not a number of GPUs or a list of GPU ids. {CHOICES}"),
    ("cuda:0", f"devices='cuda:0' is not a number of GPUs or a list of GPU ids. {CHOICES}"),
]


@pytest.mark.parametrize(("devices", "message"), VALUE_ERRORS, ids=[repr(v) for v, _ in VALUE_ERRORS])
def test_values_that_select_nothing_sensible_are_refused(fake_gpus: FakeGPUs, devices: Any, message: str) -> None:
    fake_gpus(4)
    with pytest.raises(ValueError) as error:
        parse_cuda_devices(devices)
    assert str(error.value) == message


# -- errors against the visible GPUs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "devices", "message"),
    [
        (
            4,
            5,
            "devices=5 asks for 5 GPUs, but only 4 GPUs are visible (ids 0-3). Hint: devices=4 or devices=-1 uses "
            "all of them.",
        ),
        (
            1,
            2,
            "devices=2 asks for 2 GPUs, but only 1 GPU is visible (id 0). Hint: devices=1 or devices=-1 uses all of "
            "them.",
        ),
        (
            4,
            [4],
            "devices=[4] asks for GPU 4, but only 4 GPUs are visible (ids 0-3). Hint: use ids from 0 to 3, or "
            "devices=-1 for all of them.",
        ),
        (
            4,
            "3,5,7",
            "devices='3,5,7' asks for GPUs 5, 7, but only 4 GPUs are visible (ids 0-3). Hint: use ids from 0 "
            "to 3, or devices=-1 for all of them.",
        ),
        (
            1,
            [1],
            "devices=[1] asks for GPU 1, but only 1 GPU is visible (id 0). Hint: use id 0, or devices=-1 for all "
            "of them.",
        ),
    ],
    ids=["count", "count-one-gpu", "id", "ids", "id-one-gpu"],
)
def test_asking_for_more_than_is_visible_lists_what_is(
    fake_gpus: FakeGPUs, count: int, devices: Any, message: str
) -> None:
    fake_gpus(count)
    with pytest.raises(ValueError) as error:
        parse_cuda_devices(devices)
    assert str(error.value) == message


def test_ids_out_of_range_explain_cuda_visible_devices(fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    fake_gpus(2)
    assert parse_cuda_devices([1]) == [1]  # the GPU the driver calls 5
    with pytest.raises(ValueError) as error:
        parse_cuda_devices([3])
    assert str(error.value) == (
        "devices=[3] asks for GPU 3, but only 2 GPUs are visible (CUDA_VISIBLE_DEVICES=4,5: ids 0-1). Ids count "
        "within CUDA_VISIBLE_DEVICES, so id 0 is the GPU the driver calls 4, not GPU 0 of nvidia-smi. Hint: use ids "
        "from 0 to 1, or devices=-1 for all of them."
    )
    with pytest.raises(ValueError) as error:
        parse_cuda_devices(4)
    assert str(error.value) == (
        "devices=4 asks for 4 GPUs, but only 2 GPUs are visible (CUDA_VISIBLE_DEVICES=4,5: ids 0-1). Hint: devices=2 "
        "or devices=-1 uses all of them. CUDA_VISIBLE_DEVICES limits which GPUs this process sees; name more GPUs "
        "there to use them."
    )


@pytest.mark.parametrize("devices", [1, -1, "auto", [0], "0,", 0, "gpu0"])
def test_without_any_gpu_every_request_says_why(devices: Any) -> None:
    with pytest.raises(ValueError) as error:
        parse_cuda_devices(devices)
    assert str(error.value) == f"No CUDA GPU is usable here (devices={devices!r}): {NO_CUDA_BUILD}"


def test_without_any_gpu_a_wrong_type_is_still_a_type_error() -> None:
    with pytest.raises(TypeError, match="devices=True is a bool"):
        parse_cuda_devices(True)


def test_the_count_can_be_given(fake_gpus: FakeGPUs) -> None:
    fake_gpus(0)
    assert parse_cuda_devices(-1, count=3) == [0, 1, 2]


def test_a_strategy_made_for_a_gpu_that_is_not_there_is_refused_when_the_trainer_is_made(fake_gpus: FakeGPUs) -> None:
    fake_gpus(2)
    with pytest.raises(
        MisconfigurationError,
        match=r"strategy=SingleDeviceStrategy was made for device 'cuda:5', but CUDAAccelerator.auto_device_count\(\) "
        r"reports 2 on this machine\. Hint: give the strategy a device index from 0 to 1\.",
    ):
        resolve(accelerator="cuda", strategy=SingleDeviceStrategy(device="cuda:5"))


def test_a_strategy_made_for_one_of_several_gpus_runs_there_with_devices_auto(fake_gpus: FakeGPUs) -> None:
    fake_gpus(2)
    resolution = resolve(accelerator="cuda", strategy=SingleDeviceStrategy(device="cuda:1"))  # no longer "devices=2"
    assert resolution.num_devices == 1 and resolution.strategy.root_device == torch.device("cuda", 1)
