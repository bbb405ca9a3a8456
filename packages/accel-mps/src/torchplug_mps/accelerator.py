"""The ``mps`` accelerator: Apple GPUs through ``torch.backends.mps`` and ``torch.mps``."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug import Accelerator
from torchplug_mps import _vendor

__all__ = ["MPSAccelerator"]

#: The precisions MPS trains in. Not ``64-true``: Metal has no float64.
_PRECISIONS: Final = frozenset({"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"})
_AUTOCAST: Final = frozenset({"16-mixed", "bf16-mixed"})
_BFLOAT16: Final = frozenset({"bf16-mixed", "bf16-true"})

_DEVICES_HELP: Final = "A Mac has one MPS device: use devices=1 (or -1, 'auto', [0])."


class MPSAccelerator(Accelerator):
    """Train on the Apple GPU of this Mac: one device, ``torch.autocast("mps")`` for the mixed precisions.

    ``devices=`` is 1 (or ``-1``, ``"auto"``, ``[0]``): a Mac has one MPS device, so several
    processes on it are refused. ``16-mixed`` and ``bf16-mixed`` autocast on ``"mps"`` where
    torch supports it (bfloat16 needs macOS 14); ``64-true`` is refused (Metal has no float64).
    """

    name: ClassVar[str] = "mps"
    auto_priority: ClassVar[int] = 50
    device_type: ClassVar[str] = "mps"
    autocast_device_type: ClassVar[str | None] = "mps"
    # torch's own choice for MPS tensors (torch.distributed.get_default_backend_for_device("mps")).
    process_group_backend: ClassVar[str] = "gloo"
    supported_precisions: ClassVar[frozenset[str] | None] = _PRECISIONS

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether this is a Mac, this torch has MPS and this Mac can run it (``torch.backends.mps``)."""
        return MPSAccelerator.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why MPS cannot run: not macOS, torch built without MPS, macOS too old or no Metal GPU (None if it can)."""
        return _vendor.probe() or _vendor.mps_unavailable_reason()

    @staticmethod
    @override
    def auto_device_count() -> int:
        """One: the GPU of this Mac."""
        return 1

    @staticmethod
    @override
    def parse_devices(devices: Any) -> list[int]:
        """``[0]`` for ``1``, ``-1``, ``"1"``, ``"-1"``, ``[0]`` or ``"0,"``; anything else is refused, saying why."""
        value = devices.strip().strip("[]").rstrip(",").strip() if isinstance(devices, str) else devices
        if isinstance(value, bool):
            raise TypeError(f"devices={devices!r} is not valid with the MPS accelerator. {_DEVICES_HELP}")
        if value in (1, -1, "1", "-1"):
            return [0]
        listed = value if isinstance(value, (list, tuple)) else None
        if (isinstance(devices, str) and value == "0") or (listed is not None and list(listed) == [0]):
            return [0]
        raise ValueError(f"devices={devices!r} is not valid with the MPS accelerator. {_DEVICES_HELP}")

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``[torch.device("mps", 0)]``."""
        return [torch.device("mps", index) for index in devices]

    # -- per process --------------------------------------------------------------------------

    @override
    def setup_device(self, device: torch.device) -> None:
        """Check that ``device`` is the MPS device; there is nothing to select.

        Raises:
            ValueError: ``device`` is not an MPS device.
        """
        if device.type != self.device_type:
            raise ValueError(f"The mps accelerator cannot run on device {str(device)!r}; expected 'mps:0'.")

    @override
    def teardown(self) -> None:
        """Give the memory that torch's MPS allocator caches back to the system."""
        _vendor.mps().empty_cache()

    @override
    def synchronize(self, device: torch.device) -> None:
        """Wait for the work queued on the GPU (``torch.mps.synchronize``), so that timings include it."""
        _vendor.mps().synchronize()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory in bytes: held by tensors, held by the Metal driver for this process, and the recommended limit."""
        mps = _vendor.mps()
        return {
            "memory_allocated_bytes": int(mps.current_allocated_memory()),
            "memory_driver_allocated_bytes": int(mps.driver_allocated_memory()),
            "memory_recommended_max_bytes": int(mps.recommended_max_memory()),
        }

    # -- precision ------------------------------------------------------------------------------

    @override
    def supports_precision(self, precision: str) -> bool:
        """The precisions Metal computes in here: no float64; bfloat16 from macOS 14; autocast where torch has it."""
        if precision not in _PRECISIONS:
            return False
        if precision in _AUTOCAST and not _vendor.autocast_supported():
            return False
        return precision not in _BFLOAT16 or _vendor.bf16_supported()

    # -- random state -------------------------------------------------------------------------

    @override
    def get_rng_state(self) -> dict[str, torch.Tensor]:
        """The MPS generator's state, as a CPU byte tensor (``torch.mps.get_rng_state``)."""
        return {"mps": _vendor.mps().get_rng_state().clone()}

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned; another accelerator's state is ignored, with a warning."""
        if state is None:
            return
        saved = state.get("mps") if isinstance(state, dict) else None
        if not isinstance(saved, torch.Tensor):
            warnings.warn(
                f"The checkpoint's accelerator random state is not an MPS one ({type(state).__name__}); the MPS "
                "generator keeps its current state.",
                stacklevel=2,
            )
            return
        _vendor.mps().set_rng_state(saved)
