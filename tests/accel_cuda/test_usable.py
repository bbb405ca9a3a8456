"""find_usable_cuda_devices: GPUs held by other processes are skipped, the ranks agree, errors list each GPU."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.accel_cuda.conftest import FakeGPUs
from torchplug import SettingsError
from torchplug_cuda import find_usable_cuda_devices
from torchplug_cuda._usable import REUSE_ENV, try_cuda_devices

BUSY = "CUDA error: CUDA-capable device(s) is/are busy or unavailable"
HINT = (
    "Hint: nvidia-smi shows the processes holding them; GPUs in exclusive compute mode serve one process at a "
    "time. Wait for them, or ask for fewer."
)

Busy = Callable[..., list[int]]


@pytest.fixture
def busy_gpus(fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch) -> Busy:
    """``busy_gpus(4, busy={0, 2})``: 4 GPUs, where allocating on 0 and 2 fails; returns the ids tried, in order."""
    tried: list[int] = []
    real_empty = torch.empty

    def install(count: int, busy: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
        fake_gpus(count)

        def empty(*size: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
            if device is None or torch.device(device).type != "cuda":
                return real_empty(*size, device=device, **kwargs)
            tried.append(device.index)
            if device.index in busy:
                raise RuntimeError(
                    f"{BUSY}\nCUDA kernel errors might be asynchronously reported at some other API "
                    "call, so the stacktrace below might be incorrect."
                )
            return real_empty(*size, **kwargs)

        monkeypatch.setattr(torch, "empty", empty)
        return tried

    return install


def test_busy_gpus_are_skipped_and_the_search_stops_when_enough_work(busy_gpus: Busy) -> None:
    tried = busy_gpus(4, busy={0})
    assert find_usable_cuda_devices(2, isolated=False) == [1, 2]
    assert tried == [0, 1, 2]


def test_minus_one_returns_every_usable_gpu(busy_gpus: Busy) -> None:
    busy_gpus(4, busy={0, 2})
    assert find_usable_cuda_devices(isolated=False) == [1, 3]


def test_too_few_usable_gpus_lists_each_failure(busy_gpus: Busy) -> None:
    busy_gpus(4, busy={0, 2})
    with pytest.raises(RuntimeError) as error:
        find_usable_cuda_devices(3, isolated=False)
    assert str(error.value) == (
        "find_usable_cuda_devices(3) looked for 3 usable GPUs and found only 2 ([1, 3]). The others could not take a "
        f"tensor:\n  GPU 0: {BUSY}\n  GPU 2: {BUSY}\n{HINT}"
    )


def test_no_usable_gpu_at_all(busy_gpus: Busy) -> None:
    busy_gpus(2, busy={0, 1})
    with pytest.raises(RuntimeError) as error:
        find_usable_cuda_devices(-1, isolated=False)
    assert str(error.value).startswith("find_usable_cuda_devices(-1) looked for any usable GPU and found none. ")
    assert f"  GPU 1: {BUSY}\n" in str(error.value)


def test_zero_asks_for_nothing_and_tries_nothing(busy_gpus: Busy) -> None:
    tried = busy_gpus(2)
    assert find_usable_cuda_devices(0) == []
    assert tried == []


def test_asking_for_more_than_is_visible(busy_gpus: Busy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    tried = busy_gpus(4)
    with pytest.raises(ValueError) as error:
        find_usable_cuda_devices(5)
    assert str(error.value) == (
        "find_usable_cuda_devices(5) asks for 5 GPUs, but only 4 GPUs are visible "
        "(CUDA_VISIBLE_DEVICES=0,1,2,3: ids 0-3)."
    )
    assert tried == []


@pytest.mark.parametrize(("value", "error"), [(True, TypeError), (1.0, TypeError), ("2", TypeError), (-2, ValueError)])
def test_the_request_must_be_an_int_from_minus_one(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"find_usable_cuda_devices\({value!r}\): give a number of GPUs"):
        find_usable_cuda_devices(value)


def test_without_any_gpu_the_reason_is_given() -> None:
    with pytest.raises(
        RuntimeError,
        match=r"find_usable_cuda_devices\(2\) found no GPU: torch was built without "
        r"CUDA \(torch .*\+cpu\)",
    ):
        find_usable_cuda_devices(2)


def test_try_cuda_devices_reports_each_gpu(busy_gpus: Busy) -> None:
    busy_gpus(3, busy={1})
    assert try_cuda_devices(range(3)) == {0: None, 1: BUSY, 2: None}
    assert try_cuda_devices(range(3), limit=1) == {0: None}


# -- every rank gets the same answer ----------------------------------------------------------


def test_the_answer_is_left_for_the_ranks_the_launcher_starts(busy_gpus: Busy) -> None:
    busy_gpus(4, busy={0})
    assert find_usable_cuda_devices(2, isolated=False) == [1, 2]
    assert os.environ[REUSE_ENV] == f"{os.getpid()}|2:*|1,2"


def test_a_rank_started_by_the_launcher_reuses_its_parents_answer(
    busy_gpus: Busy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 0 has taken GPU 1 by now; trying again here would answer [2, 3] and the ranks would disagree.
    tried = busy_gpus(4, busy={0, 1})
    monkeypatch.setenv(REUSE_ENV, f"{os.getpid() + 1}|2:*|1,2")
    assert find_usable_cuda_devices(2, isolated=False) == [1, 2]
    assert tried == []


@pytest.mark.parametrize(
    "stored",
    ["{this}|2:*|1,2", "{other}|3:*|1,2,3", "{other}|2:0,1,2,3|1,2"],
    ids=["same-process", "other-count", "other-visible-devices"],
)
def test_an_answer_for_another_request_or_this_process_is_not_reused(
    busy_gpus: Busy, monkeypatch: pytest.MonkeyPatch, stored: str
) -> None:
    tried = busy_gpus(4, busy={0, 1})
    monkeypatch.setenv(REUSE_ENV, stored.format(this=os.getpid(), other=os.getpid() + 1))
    assert find_usable_cuda_devices(2, isolated=False) == [2, 3]
    assert tried == [0, 1, 2, 3]


@pytest.mark.parametrize("stored", ["garbage", "{other}|2:*|x,y", "0,1"], ids=["garbage", "bad-ids", "a-device-list"])
def test_a_value_never_written_by_us_is_an_error_naming_the_variable(
    busy_gpus: Busy, monkeypatch: pytest.MonkeyPatch, stored: str
) -> None:
    tried = busy_gpus(4, busy={0, 1})
    value = stored.format(other=os.getpid() + 1)
    monkeypatch.setenv(REUSE_ENV, value)
    with pytest.raises(SettingsError, match=re.escape(f"{REUSE_ENV}={value!r} is not valid. Allowed: unset, or")):
        find_usable_cuda_devices(2, isolated=False)
    assert tried == []


# -- the isolated trial, in a real child process ----------------------------------------------


def test_the_trial_runs_in_a_child_process_by_default(fake_gpus: FakeGPUs) -> None:
    # This process is told there are 2 GPUs; the child, with this machine's real CPU build of
    # torch, finds that neither takes a tensor. The parent itself never touches CUDA.
    fake_gpus(2)
    with pytest.raises(RuntimeError) as error:
        find_usable_cuda_devices(1)
    message = str(error.value)
    assert message.startswith("find_usable_cuda_devices(1) looked for 1 usable GPU and found none.")
    assert "  GPU 0: Torch not compiled with CUDA enabled\n  GPU 1: Torch not compiled with CUDA enabled\n" in message
    assert not torch.cuda.is_initialized()
    assert REUSE_ENV not in os.environ


def test_a_child_that_hangs_is_stopped(fake_gpus: FakeGPUs) -> None:
    fake_gpus(1)
    with pytest.raises(RuntimeError, match=r"Trying the GPUs took more than 0.01 s \(a GPU may hang\)"):
        find_usable_cuda_devices(1, timeout=0.01)
