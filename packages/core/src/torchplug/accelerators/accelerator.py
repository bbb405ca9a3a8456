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

    The class attributes are the accelerator's answers to the core, which never tests device
    types itself; override them. What each means:

    Attributes:
        name: The registry name this class is usually known by. Informational only: the name
            passed to ``registry.register`` is the one users type.
        auto_priority: Its rank for ``accelerator="auto"``, which picks the available accelerator
            with the highest priority. The scale: 0 is the CPU (the fallback, always available);
            about 10 a device torch already knows served generically or a CPU-backed device;
            50 GPUs (``cuda``); 80 to 100 dedicated training chips (``hpu`` 80, ``ipu`` 90,
            ``tpu`` 100). Ties between two available accelerators are settled by the registry
            name, in alphabetical order, and ``trainer.describe()`` lists every other available
            accelerator with its priority: give a distinct priority rather than rely on it.
        device_type: The ``torch.device`` type of this hardware (``"cpu"``, ``"cuda"``, ``"xla"``...).
        autocast_device_type: The device type given to ``torch.autocast`` and
            ``torch.amp.GradScaler``; None means mixed precision through autocast is not supported
            (``precision="16-mixed"`` is then refused, naming this accelerator).
        process_group_backend: The ``torch.distributed`` backend of process groups on this
            hardware (``"gloo"``, ``"nccl"``, ``"hccl"``...), used unless the strategy names one.
        default_precision: The registry name of the precision used when the user gives none.
        supported_precisions: The registry names of the precisions this hardware can train in
            (a ``frozenset``); None means every registered precision. Any other is refused
            before training, naming this accelerator and listing these.
        single_device_strategy: The registry name of the strategy for one device on one node
            (``strategy="auto"`` with ``devices=1``).
        parallel_strategy: The registry name of the strategy for several devices or nodes
            (``strategy="auto"``); in a notebook ``"ddp"`` becomes ``"ddp_fork"`` (see
            :meth:`default_strategy`). It must start or join one process per device.
        default_checkpoint_io: The registry name of the checkpoint IO this hardware needs (for
            example one that moves tensors off the device first); None means the core's default.
        devices_are_processes: True when ``devices=N`` counts processes that share this hardware
            (the CPU), so any N is fine; False (the default) when it counts devices, and the core
            then refuses more devices (or a higher id) than :meth:`auto_device_count` reports,
            quoting both.

    Where each method runs, and when, is the README's "Accelerator contract": everything up to
    :meth:`get_parallel_devices` runs in the main process before any worker starts or forks;
    :meth:`setup_device`, :meth:`deterministic_setup` and :meth:`teardown` run in every worker.
    """

    name: ClassVar[str] = ""
    auto_priority: ClassVar[int] = 0
    device_type: ClassVar[str] = "cpu"
    autocast_device_type: ClassVar[str | None] = None
    process_group_backend: ClassVar[str] = "gloo"
    default_precision: ClassVar[str] = "32-true"
    supported_precisions: ClassVar[frozenset[str] | None] = None
    single_device_strategy: ClassVar[str] = "single_device"
    parallel_strategy: ClassVar[str] = "ddp"
    default_checkpoint_io: ClassVar[str | None] = None
    devices_are_processes: ClassVar[bool] = False

    # -- availability and devices -------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def is_available() -> bool:
        """Whether the hardware and its runtime are present.

        Must not initialise the device runtime: it runs in the main process before workers fork.
        It is plugin code called at the plugin boundary: within ``TORCHPLUG_PLUGIN_TIMEOUT``
        seconds, and whatever it raises reaches the user as a ``BrokenPluginError`` naming your
        distribution and quoting your message. Return False (and explain in
        :meth:`unavailable_reason`) rather than raise for a missing device or library.
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
        """How many devices this process can use: what ``devices="auto"`` and ``devices=-1`` mean.

        Unless :attr:`devices_are_processes`, the core refuses a ``devices=`` value asking for
        more devices (or a higher id) than this. Runs before workers fork: count without
        initialising the device runtime.
        """

    @staticmethod
    @abstractmethod
    def parse_devices(devices: Any) -> Any:
        """Check and normalise the user's ``devices=`` value.

        The value is an int, ``-1``, ``"0,2"``, a list...; ``"auto"`` was already replaced by
        :meth:`auto_device_count`. Raises ``ValueError`` or ``TypeError`` that quotes the value given, as in
        ``devices=[0, 0]``, and says what is allowed. Return a count or a list of device ids
        (what :meth:`get_parallel_devices` takes). :func:`torchplug.accelerators.parse_device_ids`
        implements the common grammar (count, ``-1``, ``"0,2"``, lists) against a device count.
        """

    @staticmethod
    @abstractmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """The ``torch.device`` of each local process, from the value :meth:`parse_devices` returned.

        Item ``i`` is the device of local rank ``i`` (its index in the list, not its device id):
        ``devices=[2, 3]`` gives ``[xpu:2, xpu:3]``, and local rank 1 computes on ``xpu:3``.
        The length is the number of processes per node. Runs in the main process, before any
        worker starts: build ``torch.device`` objects, touch no device.
        """

    @abstractmethod
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of this process (for example ``torch.cuda.set_device``).

        Called once in every worker, first thing in the strategy's ``setup_environment`` (before
        the process group is joined, so that collectives bind to this device). ``device`` is
        ``get_parallel_devices(...)[local_rank]``: the strategy reads the local rank from the
        cluster environment (``LOCAL_RANK`` set by torchplug's launchers or torchrun,
        ``SLURM_LOCALID`` under srun...), so this method need not look it up. This is the first
        place where the device runtime may be initialised.
        """

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

    @classmethod
    def runtime_class(cls) -> type[Accelerator]:
        """The class whose attributes describe this accelerator on this machine: ``cls`` itself by default.

        An accelerator class that binds itself to a device on construction (its ``__new__`` returns
        an instance of a subclass, as the generic ``torch`` accelerator does for torch's current
        device type) returns that subclass, so that tools reading class attributes
        (``device_type``, ``process_group_backend``...) see what an instance will have. Call it
        only where the accelerator is available.
        """
        return cls

    def set_benchmark(self, enabled: bool) -> bool:
        """Turn the tuning of kernels to the input sizes seen on or off (``Trainer(benchmark=...)``).

        Called in every process once its device is selected, before any step runs, when the user
        gives ``benchmark=True``/``False`` (and with False for ``deterministic=True``). Return
        whether the hardware has such a setting: False (the default) makes the Trainer say that
        ``benchmark=`` has no effect here. CUDA sets ``torch.backends.cudnn.benchmark``.
        """
        return False

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
        The parameter may have any name: Lightning's ``accelerator_registry`` works as is. An
        entry point naming a class imports its module while plugins are listed; if that module
        imports torch, ``core plugins list`` flags it with the time it cost (name a small module
        of hooks instead to keep listing torch-free).
        """

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
