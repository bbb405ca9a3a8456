"""How many GPUs this process sees, why it sees none, and which ones ``devices=`` selects.

Counting never initialises CUDA, so it is safe before the DDP launchers fork: it goes through
``torch.cuda.device_count()``, which (torch 2.0 and later) asks NVML, the driver's management
library, and only falls back to the CUDA runtime when NVML cannot answer (no NVML, or GPUs named
by MIG UUID in ``CUDA_VISIBLE_DEVICES``). ``torch.cuda.is_available()`` is never called: unless
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` is set it asks the CUDA runtime, which initialises the driver
in this process and poisons fork.

GPU ids count within ``CUDA_VISIBLE_DEVICES``, as they do everywhere in CUDA: with
``CUDA_VISIBLE_DEVICES=4,5``, ``devices=[0]`` is the GPU the driver calls 4.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

import torch

from torchplug_cuda._vendor import VISIBLE_DEVICES_ENV, driver_reason, hidden_reason

__all__ = ["cuda_unavailable_reason", "is_cuda_available", "num_cuda_devices", "parse_cuda_devices"]

_ALL = "all"
_CHOICES = (
    "Give a number of GPUs (devices=2), -1 or 'auto' for all of them, or a list of ids (devices=[0, 2] or '0,2')."
)


def num_cuda_devices() -> int:
    """The number of GPUs this process can use, counted without initialising CUDA (safe before a fork)."""
    return torch.cuda.device_count()


def is_cuda_available() -> bool:
    """Whether this process sees at least one GPU; unlike ``torch.cuda.is_available()``, safe before a fork."""
    return num_cuda_devices() > 0


def cuda_unavailable_reason() -> str | None:
    """Why no GPU is usable here, in words a user can act on; None when at least one is."""
    if num_cuda_devices() > 0:
        return None
    if not torch.backends.cuda.is_built():
        return (
            f"torch was built without CUDA (torch {torch.__version__}). Hint: install a CUDA build of torch "
            "(https://pytorch.org/get-started/locally/), or use accelerator='cpu'."
        )
    if torch.version.hip:
        return (
            f"torch {torch.__version__} (a ROCm build) finds no AMD GPU. Hint: rocm-smi lists what the "
            "driver sees; check HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES."
        )
    value = os.environ.get(VISIBLE_DEVICES_ENV)
    return (
        hidden_reason()
        or driver_reason()
        or (
            f"none of the GPUs that {VISIBLE_DEVICES_ENV}={value!r} names exists. "
            "Hint: nvidia-smi -L lists the GPUs with their ids and UUIDs."
            if value is not None
            else "the NVIDIA driver is loaded but reports no GPU. Hint: nvidia-smi shows what the driver sees; "
            "inside a container, start it with GPUs (docker run --gpus all)."
        )
    )


def parse_cuda_devices(devices: Any, count: int | None = None) -> list[int]:
    """The GPU ids that ``devices=`` selects, checked against the GPUs this process sees.

    Accepted values (ids count within ``CUDA_VISIBLE_DEVICES``):

    - an int ``N > 0``, or a string of digits: the first N GPUs (``devices=2`` is ``[0, 1]``);
    - ``-1``, ``"-1"`` or ``"auto"``: every visible GPU;
    - a list or tuple of ids (``[0, 2]``), or a string of ids with a comma (``"0,2"``, ``"1,"``)
      or in brackets (``"[1]"``, ``"[0, 2]"``): exactly those GPUs.

    Note that ``devices=1`` and ``devices="1"`` mean one GPU (id 0), while ``devices=[1]`` and
    ``devices="1,"`` mean the GPU with id 1.

    Args:
        devices: The user's ``devices=`` value.
        count: How many GPUs are visible; counted with :func:`num_cuda_devices` when None.

    Raises:
        TypeError: ``devices`` has a type that means nothing here (a bool, a float, None...).
        ValueError: No GPU is usable here, or the value asks for none, for a negative or
            repeated id, or for more GPUs than are visible. The message quotes ``devices=``,
            lists the visible ids, and says how to fix it.
    """
    count = num_cuda_devices() if count is None else count
    try:
        request = _normalise(devices)
    except ValueError:
        if count > 0:
            raise
        request = _ALL  # with no GPU at all, that is the error to report (devices='auto' arrives here as 0)
    if count == 0:
        raise ValueError(f"No CUDA GPU is usable here (devices={devices!r}): {cuda_unavailable_reason()}")
    if isinstance(request, str):  # _ALL
        return list(range(count))
    if isinstance(request, int):
        if request > count:
            raise ValueError(
                f"devices={devices!r} asks for {request} GPUs, but {visible_summary(count)}. "
                f"Hint: devices={count} or devices=-1 uses all of them.{_more_hint()}"
            )
        return list(range(request))
    missing = [i for i in request if i >= count]
    if missing:
        raise ValueError(
            f"devices={devices!r} asks for {_gpus(missing)}, but {visible_summary(count)}. "
            f"{_relative_note()}Hint: use {_valid_ids(count)}, or devices=-1 for all of them."
        )
    return request


# -- reading the value ------------------------------------------------------------------------


def _normalise(devices: Any) -> str | int | list[int]:
    """``_ALL``, a number of GPUs, or a list of ids, with every error that needs no device count."""
    if isinstance(devices, bool):
        raise TypeError(f"devices={devices!r} is a bool, which says nothing about GPUs. {_CHOICES}")
    if isinstance(devices, str):
        return _from_string(devices)
    if isinstance(devices, Sequence):
        return _check_ids(devices, [_id(devices, item) for item in devices])
    try:
        number = operator.index(devices)
    except TypeError:
        raise TypeError(f"devices={devices!r} has type {type(devices).__name__}. {_CHOICES}") from None
    return _check_number(devices, number)


def _from_string(devices: str) -> str | int | list[int]:
    text = devices.strip().lower()
    if text in ("auto", "-1"):
        return _ALL
    bracketed = text[:1] + text[-1:] in ("[]", "()")
    if bracketed or "," in text:
        inner = text[1:-1] if bracketed else text
        items = [item.strip() for item in inner.split(",") if item.strip()]
        return _check_ids(devices, [_id(devices, item) for item in items])
    if text.lstrip("-").isdigit():
        return _check_number(devices, int(text))
    raise ValueError(f"devices={devices!r} is not a number of GPUs or a list of GPU ids. {_CHOICES}")


def _id(devices: Any, item: Any) -> int:
    if isinstance(item, str) and item.strip().lstrip("-").isdigit():
        return int(item)
    if not isinstance(item, bool):
        try:
            return operator.index(item)
        except TypeError:
            pass
    raise TypeError(f"devices={devices!r} holds {item!r}, which is not a GPU id: ids are ints, as in devices=[0, 2].")


def _check_number(devices: Any, number: int) -> str | int:
    if number == -1:
        return _ALL
    if number == 0:
        raise ValueError(
            f"devices={devices!r} selects no GPU. Give a number of GPUs (devices=1), -1 for all of "
            "them, or a list of ids (devices=[0]); to train without a GPU, use accelerator='cpu'."
        )
    if number < 0:
        raise ValueError(f"devices={devices!r} is negative. {_CHOICES}")
    return number


def _check_ids(devices: Any, ids: list[int]) -> list[int]:
    if not ids:
        raise ValueError(f"devices={devices!r} lists no GPU id. {_CHOICES}")
    negative = [i for i in ids if i < 0]
    if negative:
        raise ValueError(
            f"devices={devices!r} holds the negative id {negative[0]}. GPU ids count from 0; -1 means "
            "every GPU only as the whole value (devices=-1)."
        )
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(
            f"devices={devices!r} names {_gpus(repeated)} more than once, but each GPU runs one process. "
            f"Hint: list each id once, as in devices={sorted(set(ids))!r}."
        )
    return ids


# -- describing what is visible ---------------------------------------------------------------


def _gpus(ids: list[int]) -> str:
    return f"GPU {ids[0]}" if len(ids) == 1 else f"GPUs {', '.join(map(str, ids))}"


def _valid_ids(count: int) -> str:
    return "id 0" if count == 1 else f"ids from 0 to {count - 1}"


def visible_summary(count: int) -> str:
    """``only 2 GPUs are visible (CUDA_VISIBLE_DEVICES=4,5: ids 0-1)``, or without the variable when unset."""
    amount = "1 GPU is" if count == 1 else f"{count} GPUs are"
    ids = "id 0" if count == 1 else f"ids 0-{count - 1}"
    value = os.environ.get(VISIBLE_DEVICES_ENV)
    where = f"{VISIBLE_DEVICES_ENV}={value}: {ids}" if value is not None else ids
    return f"only {amount} visible ({where})"


def _relative_note() -> str:
    value = os.environ.get(VISIBLE_DEVICES_ENV)
    if value is None:
        return ""
    first = value.split(",")[0].strip()
    return (
        f"Ids count within {VISIBLE_DEVICES_ENV}, so id 0 is the GPU the driver calls {first}, not GPU 0 "
        "of nvidia-smi. "
    )


def _more_hint() -> str:
    if os.environ.get(VISIBLE_DEVICES_ENV) is None:
        return ""
    return f" {VISIBLE_DEVICES_ENV} limits which GPUs this process sees; name more GPUs there to use them."
