"""The generic accelerator: the device that ``torch.accelerator`` reports, served with no plugin package.

torch (2.5 and later) loads out-of-tree device backends at ``import torch`` through the
``torch.backends`` entry-point group, and ``torch.accelerator`` describes the one accelerator a
process has (a PrivateUse1 backend, XPU, MPS, CUDA...). :class:`TorchDeviceAccelerator` serves that
device asking torch for everything: the devices (``torch.accelerator``), the autocast device type
(``torch.amp.is_autocast_available``), the random states (``torch.get_device_module``), the memory
statistics (``torch.accelerator.memory_*``) and the process-group backend
(``torch.distributed.get_default_backend_for_device``). No device name is listed anywhere.

A dedicated plugin always wins: when an installed accelerator claims the device type (its
registry name or alias is the device type, or its class's ``device_type`` is), the generic one
reports itself unavailable with that reason, and ``accelerator="auto"`` takes the dedicated one.

``TorchDeviceAccelerator()`` returns an instance of a class bound to one device type
(:func:`torch_device_accelerator`), so the answers above are class attributes as for every other
accelerator.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug._errors import MisconfigurationError, PluginUnavailableError, UnknownPluginError
from torchplug.accelerators.accelerator import Accelerator

if TYPE_CHECKING:
    from torchplug._registry import Registry, RegistryEntry

__all__ = [
    "TorchDeviceAccelerator",
    "current_device_type",
    "dedicated_claim",
    "resolve_device_type",
    "torch_device_accelerator",
]

#: The registry name of the generic accelerator.
NAME: Final = "torch"

_TARGET_PREFIX: Final = f"{__name__}:"


def current_device_type() -> str | None:
    """The device type of torch's current accelerator (``"tpdev"``, ``"xpu"``...), or None when torch has none."""
    device = torch.accelerator.current_accelerator()
    return None if device is None else device.type


def _provider_label(entry: RegistryEntry[Any]) -> str:
    return str(entry.provider)


def dedicated_claim(device_type: str, registry: Registry[Accelerator] | None = None) -> str | None:
    """Which installed accelerator plugin claims ``device_type``, in words; None when none does.

    A plugin claims a device type when one of its registry names or aliases is the device type
    (known without importing it), or when its class's ``device_type`` is (its class is imported,
    inside a guard: a class that fails to import claims nothing, and is listed as broken).
    """
    claim = _claim(device_type, registry)
    return None if claim is None else claim[1]


def _claim(device_type: str, registry: Registry[Accelerator] | None) -> tuple[str, str] | None:
    """``(name, words)`` of the plugin claiming ``device_type`` (see :func:`dedicated_claim`), or None."""
    if registry is None:
        from torchplug._host import plugin_host

        registry = plugin_host().registry("accelerator")
    others = [e for e in registry.entries() if not e.target_path.startswith(_TARGET_PREFIX)]
    for entry in others:
        if device_type in (entry.name, *entry.aliases):
            return entry.name, f"the accelerator {entry.name!r} from {_provider_label(entry)}"
    for entry in others:
        if entry.error is not None:
            continue
        try:
            cls = entry.load()
        except Exception:  # broken: the listing and accelerator="auto" report it; it claims nothing
            continue
        if getattr(cls, "device_type", None) == device_type and not issubclass(cls, TorchDeviceAccelerator):
            words = f"the accelerator {entry.name!r} (device_type={device_type!r}) from {_provider_label(entry)}"
            return entry.name, words
    return None


def serving_reason(device_type: str | None, registry: Registry[Accelerator] | None = None) -> str | None:
    """Why the generic accelerator cannot serve ``device_type`` (None: torch's current accelerator), or None.

    The reasons, in the order they are asked: torch has no accelerator; it has another one than
    ``device_type``; a dedicated plugin claims it; torch says it is unavailable or has no device.
    """
    current = current_device_type()
    if current is None:
        return (
            "torch reports no accelerator (torch.accelerator.current_accelerator() is None): no device backend "
            "is loaded and no built-in one (CUDA, XPU, MPS...) is usable here. Hint: install your device's torch "
            "backend package (torch loads it at import through the 'torch.backends' entry points)."
        )
    if device_type is not None and device_type != current:
        return (
            f"torch's current accelerator is {current!r}, not {device_type!r} (torch.accelerator describes one "
            f"device type per process). Hint: use accelerator={current!r}."
        )
    claim = _claim(current, registry)
    if claim is not None:
        name, words = claim
        return (
            f"torch's accelerator {current!r} is served by {words}, which always wins over the generic one. "
            f"Hint: use accelerator={name!r}."
        )
    if not torch.accelerator.is_available():
        return f"torch's accelerator {current!r} reports itself unavailable (torch.accelerator.is_available() is False)"
    if torch.accelerator.device_count() < 1:
        return f"torch's accelerator {current!r} reports no device (torch.accelerator.device_count() is 0)"
    return None


def idle_reason(registry: Registry[Accelerator] | None = None) -> str | None:
    """Why the generic accelerator has nothing to serve (no accelerator, or a dedicated plugin claims it), or None.

    Having nothing to serve is not a fallback: ``accelerator="auto"`` lists it without a warning.
    """
    current = current_device_type()
    if current is None:
        return serving_reason(None, registry)
    return serving_reason(current, registry) if dedicated_claim(current, registry) is not None else None


def _process_group_backend(device_type: str) -> str | None:
    try:
        return str(torch.distributed.get_default_backend_for_device(device_type))
    except (ValueError, RuntimeError, AttributeError):  # no backend registered, or no torch.distributed
        return None


@functools.cache
def torch_device_accelerator(device_type: str) -> type[TorchDeviceAccelerator]:
    """The accelerator class bound to ``device_type``; its answers are asked of torch once, here."""
    backend = _process_group_backend(device_type)
    namespace = {
        "__module__": __name__,
        "__doc__": f"The generic accelerator bound to torch's device type {device_type!r}.",
        "name": device_type,
        "device_type": device_type,
        "autocast_device_type": device_type if torch.amp.is_autocast_available(device_type) else None,
        "process_group_backend": backend or "gloo",
        "torch_process_group_backend": backend,
    }
    return type(f"TorchDeviceAccelerator[{device_type}]", (TorchDeviceAccelerator,), namespace)


def _rebuild(device_type: str) -> TorchDeviceAccelerator:
    """Unpickle an instance (spawned DDP workers receive the accelerator by pickle)."""
    return torch_device_accelerator(device_type)()


def resolve_device_type(name: str, unknown: UnknownPluginError) -> type[TorchDeviceAccelerator]:
    """The generic accelerator class for ``accelerator=name`` when ``name`` is torch's current device type.

    Called for a name no plugin registered: ``Trainer(accelerator="tpdev")`` works wherever torch's
    current accelerator is ``tpdev``. Whether it can run (a dedicated plugin claiming the type
    under another name, no device) is asked of the class afterwards.

    Raises:
        UnknownPluginError: ``unknown``'s message, extended with torch's current accelerator.
    """
    key = name.strip().lower()
    current = current_device_type() if "@" not in key else None
    if current is not None and key == current:
        return torch_device_accelerator(current)
    known = f"torch's current accelerator is {current!r}" if current else "torch reports no accelerator"
    raise UnknownPluginError(f"{unknown} Nor is {name!r} a torch device type served here ({known}).") from unknown


class TorchDeviceAccelerator(Accelerator):
    """The device ``torch.accelerator`` reports, when no installed plugin claims its device type.

    ``Trainer(accelerator="torch")``, the device type itself (``accelerator="tpdev"``), or
    ``accelerator="auto"`` (priority 10: above the CPU, below every dedicated accelerator) select
    it. ``devices=`` takes a count (``2``), ``-1`` for all, or ids (``[0, 1]``, ``"0,1"``).
    ``strategy="auto"`` with several devices is ``ddp`` over the process-group backend torch
    registers for the device type (``torch.distributed.get_default_backend_for_device``).

    Args:
        device_type: The device type to serve; None serves torch's current accelerator.

    Raises:
        PluginUnavailableError: ``device_type`` is None and torch reports no accelerator.
        ValueError: ``device_type`` differs from the type the class is bound to.
    """

    name: ClassVar[str] = NAME
    auto_priority: ClassVar[int] = 10
    #: Empty on the unbound class; the class :func:`torch_device_accelerator` returns holds the device type.
    device_type: ClassVar[str] = ""
    autocast_device_type: ClassVar[str | None] = None
    process_group_backend: ClassVar[str] = "gloo"
    #: The backend torch registers for the device type; None when it registers none.
    torch_process_group_backend: ClassVar[str | None] = None

    def __new__(cls, device_type: str | None = None) -> TorchDeviceAccelerator:
        target: type[TorchDeviceAccelerator] = cls
        if not cls.device_type:  # the unbound class: bind it to the requested or current device type
            chosen = device_type or current_device_type()
            if chosen is None:
                raise PluginUnavailableError(f"TorchDeviceAccelerator has nothing to serve: {serving_reason(None)}")
            target = torch_device_accelerator(chosen)
        instance: TorchDeviceAccelerator = object.__new__(target)
        return instance

    def __init__(self, device_type: str | None = None) -> None:
        if device_type is not None and device_type != self.device_type:
            raise ValueError(
                f"{type(self).__name__} serves {self.device_type!r}, not device_type={device_type!r}. "
                f"Hint: TorchDeviceAccelerator({device_type!r})."
            )

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _rebuild, (self.device_type,)

    @classmethod
    @override
    def runtime_class(cls) -> type[Accelerator]:
        """The class bound to torch's current device type (this class when bound already, or when torch has none)."""
        if cls.device_type:
            return cls
        current = current_device_type()
        return cls if current is None else torch_device_accelerator(current)

    # -- availability and devices -------------------------------------------------------------

    @classmethod
    @override
    def is_available(cls) -> bool:
        """Whether torch's current accelerator is this device type, usable, and claimed by no plugin."""
        return cls.unavailable_reason() is None

    @classmethod
    @override
    def unavailable_reason(cls) -> str | None:
        """Why the device cannot be served: no accelerator, another one, a dedicated plugin claims it, no device."""
        return serving_reason(cls.device_type or None)

    @classmethod
    @override
    def auto_device_count(cls) -> int:
        """Every device of torch's current accelerator (``torch.accelerator.device_count()``)."""
        return int(torch.accelerator.device_count()) if current_device_type() is not None else 0

    @classmethod
    @override
    def parse_devices(cls, devices: Any) -> list[int]:
        """The device ids ``devices=`` selects: a count (first N), ``-1`` (all), or ids (``[0, 1]``, ``"0,1"``)."""
        return _parse_ids(devices, cls.auto_device_count(), cls.device_type or NAME)

    @classmethod
    @override
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
        """One ``torch.device(<type>, id)`` per id."""
        device_type = cls.device_type or current_device_type() or NAME
        return [torch.device(device_type, int(index)) for index in devices]

    # -- per process --------------------------------------------------------------------------

    @override
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` this process's current device (``torch.accelerator.set_device_index``).

        Raises:
            ValueError: ``device`` is of another type.
        """
        if device.type != self.device_type:
            raise ValueError(f"{type(self).__name__} cannot run on device {str(device)!r}.")
        torch.accelerator.set_device_index(device.index if device.index is not None else 0)

    @override
    def teardown(self) -> None:
        """Give cached device memory back (``torch.accelerator.empty_cache()``)."""
        torch.accelerator.empty_cache()

    @override
    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Memory in bytes from ``torch.accelerator``: allocated, reserved and their peaks, as the backend reports."""
        stats: dict[str, Any] = {}
        for key, function in _MEMORY_STATS.items():
            try:
                stats[key] = int(function(device))
            except (RuntimeError, NotImplementedError, AttributeError):  # the backend's allocator does not say
                continue
        return stats

    # -- random state -------------------------------------------------------------------------

    @override
    def get_rng_state(self) -> dict[str, Any] | None:
        """The default generator state of every device, from the device module (``torch.get_device_module``)."""
        module = torch.get_device_module(self.device_type)
        get_all = getattr(module, "get_rng_state_all", None)
        if get_all is None:
            return None
        return {"device_type": self.device_type, "states": [state.clone() for state in get_all()]}

    @override
    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned; a state of another device type is ignored with a warning."""
        if state is None:
            return
        if not isinstance(state, dict) or state.get("device_type") != self.device_type:
            warnings.warn(
                f"The checkpoint's accelerator random state was not saved on {self.device_type!r}; the devices keep "
                "their current random state.",
                stacklevel=2,
            )
            return
        module = torch.get_device_module(self.device_type)
        states = list(state["states"])
        count = int(torch.accelerator.device_count())
        if len(states) != count:
            warnings.warn(
                f"The checkpoint holds the random states of {len(states)} {self.device_type} device(s) and this "
                f"process sees {count}; restored the first {min(len(states), count)}.",
                stacklevel=2,
            )
        for index, device_state in enumerate(states[:count]):
            module.set_rng_state(device_state, index)

    # -- decisions ------------------------------------------------------------------------------

    @override
    def default_strategy(self, num_devices: int, num_nodes: int, interactive: bool) -> str:
        """``single_device`` for one device; ``ddp`` for several, when torch registers a process-group backend.

        Raises:
            MisconfigurationError: Several devices, and torch registers no process-group backend for the type.
        """
        if num_devices * num_nodes > 1 and self.torch_process_group_backend is None:
            raise MisconfigurationError(
                f"devices={num_devices}, num_nodes={num_nodes} needs a process group, but torch registers no "
                f"process-group backend for device type {self.device_type!r} "
                "(torch.distributed.get_default_backend_for_device raised). Hint: use devices=1, or give "
                "strategy=DDPStrategy(process_group_backend=...) naming a backend that handles these tensors."
            )
        return super().default_strategy(num_devices, num_nodes, interactive)

    @override
    def __repr__(self) -> str:
        return f"TorchDeviceAccelerator(device_type={self.device_type!r})"


_MEMORY_STATS: Final = {
    "memory_allocated_bytes": lambda device: torch.accelerator.memory_allocated(device),
    "memory_reserved_bytes": lambda device: torch.accelerator.memory_reserved(device),
    "memory_peak_allocated_bytes": lambda device: torch.accelerator.max_memory_allocated(device),
    "memory_peak_reserved_bytes": lambda device: torch.accelerator.max_memory_reserved(device),
}


def _parse_ids(devices: Any, count: int, device_type: str) -> list[int]:
    """Device ids from a count, ``-1``, a sequence of ids or a string of either; errors quote the value."""
    value: Any = devices
    if isinstance(value, str):
        text = value.strip().strip("[]()").strip()
        parts = [p.strip() for p in text.split(",")]
        if not all(p.lstrip("-").isdigit() for p in parts if p) or not any(parts):
            raise ValueError(_devices_error(devices, count, device_type))
        numbers = [int(p) for p in parts if p]
        listed = "," in text or value.strip().startswith("[")
        value = numbers if listed else numbers[0]
    if isinstance(value, bool):
        raise TypeError(_devices_error(devices, count, device_type))
    if isinstance(value, int):
        if value == -1:
            value = count
        if value < 1 or value > count:
            raise ValueError(_devices_error(devices, count, device_type))
        return list(range(value))
    if isinstance(value, Sequence) and not isinstance(value, str):
        ids = list(value)
        if (
            not ids
            or any(isinstance(i, bool) or not isinstance(i, int) for i in ids)
            or len(set(ids)) != len(ids)
            or any(i < 0 or i >= count for i in ids)
        ):
            raise ValueError(_devices_error(devices, count, device_type))
        return ids
    raise TypeError(_devices_error(devices, count, device_type))


def _devices_error(devices: Any, count: int, device_type: str) -> str:
    ids = f"ids 0-{count - 1}" if count else "none"
    return (
        f"devices={devices!r} is not valid for the {device_type!r} devices torch reports ({count} device(s), "
        f"{ids}). Give a count from 1 to {count}, -1 for all, or distinct ids such as [0, 1]."
    )
