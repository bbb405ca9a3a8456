"""The ``cuda`` accelerator (alias ``gpu``): NVIDIA GPUs through ``torch.cuda``."""

from __future__ import annotations

import os
import warnings
from typing import Any, ClassVar

import torch
from typing_extensions import override

from torchplug import Accelerator
from torchplug_cuda._devices import cuda_unavailable_reason, num_cuda_devices, parse_cuda_devices
from torchplug_cuda._stats import cuda_device_stats

__all__ = ["CUDAAccelerator"]

# torch's own code asks torch.cuda.is_available() before any GPU work (GradScaler("cuda") does, when the
# Trainer sets up 16-mixed, in the parent process). Unless this variable is 1, that asks the CUDA runtime,
# which poisons fork: every worker of strategy="ddp_fork" would then fail to use its GPU. With it, torch
# asks NVML instead, as our own counting does. Lightning sets it too; set it to 0 beforehand to opt out.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


class CUDAAccelerator(Accelerator):
    """Train on NVIDIA GPUs: one process per GPU, NCCL between them, autocast on ``"cuda"``.

    ``devices=`` takes a number of GPUs (``2``), ``-1``/``"auto"`` for all, or their ids
    (``[0, 2]``, ``"0,2"``); ids count within ``CUDA_VISIBLE_DEVICES``. Nothing here initialises
    CUDA before :meth:`setup_device`, so the fork-based launchers stay usable.
    """

    name: ClassVar[str] = "cuda"
    auto_priority: ClassVar[int] = 50
    device_type: ClassVar[str] = "cuda"
    autocast_device_type: ClassVar[str | None] = "cuda"
    process_group_backend: ClassVar[str] = "nccl"
    default_precision: ClassVar[str] = "32-true"
    # Every registered precision: the core's six, and CUDA-only ones that other plugins add.
    supported_precisions: ClassVar[frozenset[str] | None] = None

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether this process sees a GPU (counted through NVML: CUDA is not initialised)."""
        return num_cuda_devices() > 0

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why no GPU is usable: a CPU build of torch, no driver, ``CUDA_VISIBLE_DEVICES``... (None if one is)."""
        return cuda_unavailable_reason()

    @staticmethod
    @override
    def auto_device_count() -> int:
        """Every GPU this process sees."""
        return num_cuda_devices()

    @staticmethod
    @override
    def parse_devices(devices: Any) -> list[int]:
        """The GPU ids ``devices=`` selects (see :func:`torchplug_cuda.parse_cuda_devices`)."""
        return parse_cuda_devices(devices)

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``cuda:<id>`` device per id."""
        return [torch.device("cuda", index) for index in devices]

    # -- per process --------------------------------------------------------------------------

    @override
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` this process's current GPU (this initialises CUDA).

        Raises:
            ValueError: ``device`` is not a CUDA device.
        """
        if device.type != self.device_type:
            raise ValueError(f"The cuda accelerator cannot run on device {str(device)!r}; expected 'cuda:<id>'.")
        torch.cuda.set_device(device)

    @override
    def teardown(self) -> None:
        """Give the memory that PyTorch's caching allocator holds back to the driver."""
        torch.cuda.empty_cache()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory of ``device`` in bytes (allocated, reserved, peaks, free, total) and utilisation when NVML has it."""
        return cuda_device_stats(device)

    @override
    def deterministic_setup(self) -> None:
        """Make cuBLAS deterministic: ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, unless the variable is already set.

        cuBLAS reads it when it creates its handle, on the first GPU matrix product; without it,
        ``torch.use_deterministic_algorithms(True)`` raises on those products with CUDA 10.2 and later.
        """
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    @override
    def set_benchmark(self, enabled: bool) -> bool:
        """``Trainer(benchmark=...)``: cuDNN tries its algorithms for each new input shape and keeps the fastest."""
        torch.backends.cudnn.benchmark = enabled
        return True

    # -- random state -------------------------------------------------------------------------

    @override
    def get_rng_state(self) -> dict[str, list[torch.Tensor]] | None:
        """The random generator state of every visible GPU, as CPU byte tensors (``weights_only``-safe)."""
        if not torch.cuda.is_initialized():
            return None  # no GPU generator has been used in this process
        return {"cuda": [state.clone() for state in torch.cuda.get_rng_state_all()]}

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned, GPU by GPU.

        A checkpoint from a machine with more GPUs restores the first ones, with a warning; a state
        saved by another accelerator is ignored with a warning.
        """
        if state is None:
            return
        states = state.get("cuda") if isinstance(state, dict) else None
        if not isinstance(states, (list, tuple)):
            warnings.warn(
                f"The checkpoint's accelerator random state is not a CUDA one ({type(state).__name__}); "
                "the GPUs keep their current random state.",
                stacklevel=2,
            )
            return
        count = num_cuda_devices()
        if len(states) != count:
            warnings.warn(
                f"The checkpoint holds the random states of {len(states)} GPU(s) and this process sees "
                f"{count}; restored the first {min(len(states), count)}.",
                stacklevel=2,
            )
        for index, device_state in enumerate(states[:count]):
            torch.cuda.set_rng_state(device_state, index)
