"""The ``hpu`` accelerator: Intel Gaudi HPUs through habana_frameworks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug import Accelerator
from torchplug_hpu import _vendor
from torchplug_hpu.precision import HPU_PRECISIONS, hpu_precision_name

__all__ = ["HPUAccelerator"]

#: ``habana_frameworks.torch.hpu.memory_stats`` keys -> the names this package reports.
_STATS: Final = {
    "InUse": "memory_used_bytes",
    "MaxInUse": "memory_peak_bytes",
    "Limit": "memory_limit_bytes",
    "NumAllocs": "allocations",
    "NumFrees": "frees",
    "ActiveAllocs": "active_allocations",
    "MaxAllocSize": "largest_allocation_bytes",
}


class HPUAccelerator(Accelerator):
    """Train on Intel Gaudi HPUs through habana_frameworks (imported the first time the accelerator is used).

    ``devices=N`` starts N processes (``strategy="hpu_parallel"``: DDP over HCCL); one device
    trains in this process (``strategy="hpu_single"``). Each process takes the next free HPU, so
    devices are counted, not chosen by id: select cards with ``HABANA_VISIBLE_MODULES``.

    The user's precision names map to this package's: ``"bf16-mixed"`` to ``"hpu-bf16-mixed"``
    (``torch.autocast("hpu")``), ``"fp8"`` to ``"hpu-fp8"`` (Intel Gaudi's transformer engine);
    ``"32-true"`` and ``"bf16-true"`` are the core's. Gaudi computes in bfloat16, so float16 and
    float64 names are refused with the choices.
    """

    name: ClassVar[str] = "hpu"
    auto_priority: ClassVar[int] = 80
    device_type: ClassVar[str] = "hpu"
    autocast_device_type: ClassVar[str | None] = "hpu"
    process_group_backend: ClassVar[str] = "hccl"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset(HPU_PRECISIONS.values())
    single_device_strategy: ClassVar[str] = "hpu_single"
    parallel_strategy: ClassVar[str] = "hpu_parallel"

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @override
    def is_available() -> bool:
        """Whether habana_frameworks is installed and sees at least one HPU."""
        return HPUAccelerator.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why HPU training cannot run here: habana_frameworks missing or broken, or no HPU."""
        missing = _vendor.probe()
        if missing is not None:
            return missing
        try:
            count = _vendor.device_count()
        except _vendor.HabanaUnavailableError as exc:
            return str(exc)
        if count < 1:
            return (
                "habana_frameworks finds no HPU on this machine (habana_frameworks.torch.hpu.device_count() is 0). "
                "Hint: check the Gaudi driver with hl-smi, or use accelerator='cpu'."
            )
        return None

    @staticmethod
    @override
    def auto_device_count() -> int:
        """All the HPUs this process can see."""
        return _vendor.device_count()

    @staticmethod
    @override
    def parse_devices(devices: Any) -> int:
        """Accept a number of HPUs (processes): a positive int, a string of digits, or ``-1`` for all."""
        if isinstance(devices, bool) or not isinstance(devices, (int, str)):
            hint = (
                " Hint: HPUs are counted, not chosen by id; pick cards with HABANA_VISIBLE_MODULES=0,1."
                if isinstance(devices, (list, tuple))
                else ""
            )
            raise TypeError(f"devices={devices!r} is not valid with accelerator='hpu': {_CHOICES}{hint}")
        text = str(devices).strip()
        if not text.lstrip("-").isdigit() or int(text) == 0 or int(text) < -1:
            raise ValueError(f"devices={devices!r} is not valid with accelerator='hpu': {_CHOICES}")
        available = HPUAccelerator.auto_device_count()
        count = available if int(text) == -1 else int(text)
        if count < 1:
            raise ValueError(f"devices={devices!r} asks for every HPU, but habana_frameworks finds none here.")
        if count > available:
            raise ValueError(
                f"devices={devices!r} asks for {count} HPUs, but this machine has {available}. "
                f"Hint: use devices={available} (or -1), or fewer."
            )
        return count

    @staticmethod
    @override
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``hpu`` once per process: each process is given the next free HPU by the runtime."""
        return [torch.device("hpu")] * int(devices)

    @override
    def setup_device(self, device: torch.device) -> None:
        """Load the HPU backend into this process (``habana_frameworks.torch.core``); checks the device type.

        Raises:
            ValueError: ``device`` is not an HPU.
        """
        if device.type != self.device_type:
            raise ValueError(f"The HPU accelerator cannot run on device {device}; expected an 'hpu' device.")
        _vendor.import_habana("habana_frameworks.torch.core")

    @override
    def teardown(self) -> None:
        """Nothing to release."""

    @override
    def synchronize(self, device: torch.device) -> None:
        """Run the recorded lazy graph and wait for the HPU, so that a timing includes the computation."""
        _vendor.mark_step()
        _vendor.synchronize()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory of the HPU from ``habana_frameworks.torch.hpu.memory_stats``: bytes used, peak and limit, allocations.

        Keys: ``memory_used_bytes``, ``memory_peak_bytes``, ``memory_limit_bytes``, ``allocations``,
        ``frees``, ``active_allocations`` and ``largest_allocation_bytes``, where the runtime reports them.
        """
        raw: Mapping[str, Any] = _vendor.hpu().memory_stats(device)
        return {ours: int(raw[theirs]) for theirs, ours in _STATS.items() if theirs in raw}

    @override
    def get_rng_state(self) -> Any:
        """The HPU generator's state (a tensor), where habana_frameworks exposes it."""
        get_state = getattr(_vendor.hpu(), "get_rng_state", None)
        return get_state() if callable(get_state) else None

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned."""
        set_state = getattr(_vendor.hpu(), "set_rng_state", None)
        if state is not None and callable(set_state):
            set_state(state)

    # -- decisions the core delegates ---------------------------------------------------------

    @override
    def precision_for(self, precision: str) -> str:
        """Map the user's precision name: ``"bf16-mixed"`` -> ``"hpu-bf16-mixed"``, ``"fp8"`` -> ``"hpu-fp8"``.

        Names HPUs cannot train in are refused with the choices.
        """
        return hpu_precision_name(precision)


_CHOICES = "give the number of HPUs (one process each), a positive int such as devices=8, or -1 for every HPU."
