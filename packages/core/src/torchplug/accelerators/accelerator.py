"""The Accelerator base class: one kind of hardware.

An accelerator answers the questions the core would otherwise answer with device-type tests:
its priority for ``accelerator="auto"``, its default strategy, its autocast device type, its
process-group backend, and the precisions it supports. A new device needs no change in the core.

This module imports no torch at import time, so plugin modules may import it freely.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from typing_extensions import override

if TYPE_CHECKING:
    import torch

    from torchplug._registry import Registry

__all__ = ["Accelerator"]


class Accelerator(ABC):
    """One kind of hardware (CPU, CUDA GPU, TPU, ...).

    Subclass it, implement the abstract methods, and register it from a plugin::

        @hookimpl
        def torchplug_register_accelerators(registry):
            registry.register("xpu", "torchplug_xpu.accelerator:XPUAccelerator", description="Intel GPUs")

    The class attributes below are the accelerator's answers to the core; override them.
    """

    #: Registry name this class is usually known by (informational; the registry decides).
    name: ClassVar[str] = ""

    #: ``accelerator="auto"`` picks the available accelerator with the highest priority.
    #: The CPU has 0; GPUs are around 50; dedicated training chips above that.
    auto_priority: ClassVar[int] = 0

    #: The ``torch.device`` type of this hardware (``"cpu"``, ``"cuda"``, ``"xla"``, ...).
    device_type: ClassVar[str] = "cpu"

    #: The device type given to ``torch.autocast`` and ``torch.amp.GradScaler``; None means mixed
    #: precision through autocast is not supported.
    autocast_device_type: ClassVar[str | None] = None

    #: The ``torch.distributed`` backend for process groups on this hardware (``"gloo"``, ``"nccl"``, ...).
    process_group_backend: ClassVar[str] = "gloo"

    #: Registry name of the precision used when the user gives none.
    default_precision: ClassVar[str] = "32-true"

    #: Registry names of the precisions this hardware supports; None means every registered one.
    supported_precisions: ClassVar[frozenset[str] | None] = None

    #: Registry name of the strategy for one device, and for several devices or nodes.
    single_device_strategy: ClassVar[str] = "single_device"
    parallel_strategy: ClassVar[str] = "ddp"

    #: Registry name of the checkpoint IO this hardware needs; None means the core's default.
    default_checkpoint_io: ClassVar[str | None] = None

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def is_available() -> bool:
        """Whether the hardware and its runtime are present.

        Must not initialise the device runtime: it may run before processes fork.
        """

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why the accelerator cannot run here, in words a user can act on (None when it can).

        Example: ``"torch_xla is not installed. Hint: pip install torch_xla"``.
        """
        return None if cls.is_available() else f"{cls.__name__}.is_available() returned False"

    @staticmethod
    @abstractmethod
    def auto_device_count() -> int:
        """How many devices ``devices="auto"`` means (all usable devices)."""

    @staticmethod
    @abstractmethod
    def parse_devices(devices: Any) -> Any:
        """Check and normalise the user's ``devices=`` value.

        The value is an int, ``-1``, ``"0,2"``, a list...; ``"auto"`` was already replaced by
        :meth:`auto_device_count`. Raises ``ValueError`` or ``TypeError`` that quotes the value given, as in
        ``devices=[0, 0]``, and says what is allowed.
        """

    @staticmethod
    @abstractmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """The ``torch.device`` of each local process, from the value :meth:`parse_devices` returned."""

    @abstractmethod
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of this process (for example ``torch.cuda.set_device``)."""

    @abstractmethod
    def teardown(self) -> None:
        """Release what :meth:`setup_device` acquired (caches, handles). Called once at the end of a run."""

    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        """Device statistics for monitoring (memory in bytes, utilisation...). Default: none."""
        return {}

    def get_rng_state(self) -> Any:
        """The device's own random generator states, saved in checkpoints for exact resumes.

        Return ``weights_only``-safe data (tensors, numbers, lists); None when the device has no
        generator beyond torch's CPU one.
        """
        return None

    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned."""

    def deterministic_setup(self) -> None:
        """Prepare this hardware's libraries for reproducible results; default: nothing to prepare.

        The Trainer calls it in every process when the user asks for ``deterministic=True`` (or
        ``"warn"``), next to ``torch.use_deterministic_algorithms``, once the process's device is
        selected and before any step runs. Set here what torch's switch does not cover, for
        example an environment variable that the vendor library reads when it creates its handles
        (CUDA's cuBLAS reads ``CUBLAS_WORKSPACE_CONFIG`` at its first matrix product). Use
        ``os.environ.setdefault`` so that a value the user set wins, and make it safe to call more
        than once.
        """

    # -- decisions the core delegates to the accelerator ----------------------------------------

    def default_strategy(self, num_devices: int, num_nodes: int, interactive: bool) -> str:
        """The registry name of the strategy for ``strategy="auto"``.

        Args:
            num_devices: Devices per node the user asked for.
            num_nodes: Number of nodes.
            interactive: True inside a notebook or REPL, where the script cannot be re-launched.
        """
        if num_devices * num_nodes <= 1:
            return self.single_device_strategy
        if interactive and self.parallel_strategy == "ddp":
            return "ddp_fork"
        return self.parallel_strategy

    def precision_for(self, precision: str) -> str:
        """Map a user's precision name to the registry name of the Precision plugin to use.

        The default is the identity. A backend whose numerics need their own plugin returns it
        here (for example a TPU maps ``"bf16-true"`` to ``"xla-bf16-true"``).
        """
        return precision

    def supports_precision(self, precision: str) -> bool:
        """Whether this hardware can train in ``precision`` (a registry name)."""
        return self.supported_precisions is None or precision in self.supported_precisions

    # -- Lightning compatibility ----------------------------------------------------------------

    @classmethod
    def register_accelerators(cls, registry: Registry[Accelerator]) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``.

        Called when the class itself is named by a ``torchplug.plugins`` entry point, or when
        user code calls ``MyAccelerator.register_accelerators(torchplug.AcceleratorRegistry)``.
        """

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
