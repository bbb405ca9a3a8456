"""Finding GPUs that can be used right now: not held by another process in exclusive compute mode."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Final

import torch

from torchplug_cuda._devices import cuda_unavailable_reason, num_cuda_devices, visible_summary

__all__ = ["REUSE_ENV", "find_usable_cuda_devices", "try_cuda_devices"]

#: Where the answer is kept for the ranks the DDP launcher starts (they inherit this process's environment).
REUSE_ENV: Final = "TORCHPLUG_CUDA_USABLE_DEVICES"

_CHILD_CODE: Final = "from torchplug_cuda._usable import _child_main; _child_main()"


def find_usable_cuda_devices(num_devices: int = -1, *, isolated: bool = True, timeout: float = 120.0) -> list[int]:
    """The ids of ``num_devices`` GPUs on which a tensor can be allocated now; ``-1`` for every usable one.

    For ``Trainer(accelerator="cuda", devices=find_usable_cuda_devices(2))`` on a shared machine,
    where GPUs in "exclusive process" compute mode may be held by other jobs. Each visible GPU is
    tried in order, by allocating a tiny tensor on it, until ``num_devices`` have worked.

    The trial runs by default in a short-lived child
    process (``isolated=True``, about two seconds to import torch there): this process keeps CUDA
    uninitialised, so ``strategy="ddp_fork"`` still works, and it holds no context on the GPUs it
    tried, which in exclusive mode would lock its own DDP ranks out of them. The answer is kept
    in the ``TORCHPLUG_CUDA_USABLE_DEVICES`` variable, so the ranks the launcher starts, which run
    the script again, get the same list instead of finding rank 0's GPU taken.

    Args:
        num_devices: How many GPUs to find; ``-1`` for all usable ones; ``0`` returns ``[]``.
        isolated: Try the GPUs in a child process (default) rather than in this one.
        timeout: Seconds the child process may take before the search fails.

    Raises:
        TypeError: ``num_devices`` is not an int.
        ValueError: ``num_devices`` is below -1, or larger than the number of visible GPUs.
        RuntimeError: No GPU is visible, or fewer than ``num_devices`` are usable; the message
            gives each unusable GPU's error.
    """
    wanted = _check_request(num_devices)
    if wanted == 0:
        return []
    count = num_cuda_devices()
    if count == 0:
        raise RuntimeError(f"find_usable_cuda_devices({num_devices}) found no GPU: {cuda_unavailable_reason()}")
    if wanted > count:
        raise ValueError(
            f"find_usable_cuda_devices({num_devices}) asks for {wanted} GPUs, but {visible_summary(count)}."
        )
    key = f"{wanted}:{os.environ.get('CUDA_VISIBLE_DEVICES', '*')}"
    inherited = _inherited(key)
    if inherited is not None:
        return inherited
    limit = None if wanted == -1 else wanted
    results = _try_in_child(count, limit, timeout) if isolated else try_cuda_devices(range(count), limit)
    usable = [index for index, error in results.items() if error is None][:limit]
    if not usable or (limit is not None and len(usable) < limit):
        raise RuntimeError(_shortage(num_devices, usable, results))
    os.environ[REUSE_ENV] = f"{os.getpid()}|{key}|{','.join(map(str, usable))}"
    return usable


def try_cuda_devices(indices: Iterable[int], limit: int | None = None) -> dict[int, str | None]:
    """Allocate a tiny tensor on each GPU in turn: its id to None when that worked, else the error.

    Stops once ``limit`` GPUs have worked. Runs in this process, which therefore initialises CUDA
    and keeps a context on every GPU it tried.
    """
    results: dict[int, str | None] = {}
    for index in indices:
        try:
            torch.empty(1, device=torch.device("cuda", index))
        except Exception as exc:  # any failure (busy, ECC, lost, not compiled) means "not usable"
            results[index] = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            continue
        results[index] = None
        if limit is not None and sum(error is None for error in results.values()) >= limit:
            break
    return results


def _check_request(num_devices: int) -> int:
    if isinstance(num_devices, bool):
        raise TypeError(f"find_usable_cuda_devices({num_devices!r}): give a number of GPUs, or -1 for all.")
    try:
        wanted = operator.index(num_devices)
    except TypeError:
        raise TypeError(
            f"find_usable_cuda_devices({num_devices!r}): give a number of GPUs (an int), or -1 for all."
        ) from None
    if wanted < -1:
        raise ValueError(f"find_usable_cuda_devices({num_devices!r}): give a number of GPUs, or -1 for all.")
    return wanted


def _inherited(key: str) -> list[int] | None:
    """The answer a parent process found for the same request, if this process inherited one.

    Raises:
        SettingsError: The variable holds something :func:`find_usable_cuda_devices` never writes.
    """
    value = os.environ.get(REUSE_ENV, "").strip()
    if not value:
        return None
    pid, _, rest = value.partition("|")
    stored_key, _, ids = rest.rpartition("|")
    if not (pid.isdigit() and stored_key and all(i.isdigit() for i in ids.split(","))):
        from torchplug import SettingsError

        raise SettingsError(
            f"{REUSE_ENV}={value!r} is not valid. Allowed: unset, or PID|REQUEST|IDS as find_usable_cuda_devices "
            f"writes it for the processes it launches (for example '4242|2:*|0,1'). Hint: unset {REUSE_ENV}; "
            "choose GPUs with CUDA_VISIBLE_DEVICES or Trainer(devices=[...])."
        )
    if pid == str(os.getpid()) or stored_key != key:
        return None  # written by this process, or for another request: not an answer to this one
    return [int(i) for i in ids.split(",")]


def _try_in_child(count: int, limit: int | None, timeout: float) -> dict[int, str | None]:
    command = [sys.executable, "-c", _CHILD_CODE, str(count), str(limit or -1)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"Trying the GPUs took more than {timeout:g} s (a GPU may hang). Hint: nvidia-smi shows "
            "their state; or pass timeout= or isolated=False to find_usable_cuda_devices."
        ) from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return {int(index): error for index, error in answer.items()}
    except (IndexError, ValueError, AttributeError):
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(
            f"The process that tries the GPUs failed (exit code {done.returncode}):\n{tail}\n"
            "Hint: pass isolated=False to find_usable_cuda_devices to try them in this process."
        ) from None


def _child_main() -> None:
    """Entry of the child process: ``COUNT LIMIT`` in argv, the JSON of :func:`try_cuda_devices` on stdout."""
    count, limit = int(sys.argv[1]), int(sys.argv[2])
    results = try_cuda_devices(range(count), None if limit == -1 else limit)
    print(json.dumps({str(index): error for index, error in results.items()}))


def _shortage(num_devices: int, usable: list[int], results: dict[int, str | None]) -> str:
    asked = "any usable GPU" if num_devices == -1 else f"{num_devices} usable GPU{'s' if num_devices > 1 else ''}"
    found = f"only {len(usable)} ({usable})" if usable else "none"
    failures = "\n".join(f"  GPU {index}: {error}" for index, error in results.items() if error is not None)
    return (
        f"find_usable_cuda_devices({num_devices}) looked for {asked} and found {found}. "
        f"The others could not take a tensor:\n{failures}\n"
        "Hint: nvidia-smi shows the processes holding them; GPUs in exclusive compute mode serve one process "
        "at a time. Wait for them, or ask for fewer."
    )
