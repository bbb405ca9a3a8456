"""The ``ipu`` strategy: the steps compiled by PopTorch, replicated over the IPUs by PopTorch itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import Accelerator, CheckpointIO, MisconfigurationError, Precision
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.utilities.env_vars import env_int
from torchplug_ipu import _vendor
from torchplug_ipu._data import poptorch_loader
from torchplug_ipu._step import StepModule, micro_batches, tensor_arguments
from torchplug_ipu.precision import NO_CLIPPING, IPUPrecision, ipu_precision_name

__all__ = ["IPUStrategy"]

_TRAIN: Final = "training_step"


class IPUStrategy(SingleDeviceStrategy):
    """Train on IPUs: each step is compiled by PopTorch, which runs forward, backward and the optimizer step there.

    One process drives every IPU. ``devices=N`` replicates the model N times
    (``poptorch.Options.replicationFactor``) and PopTorch averages the replicas' gradients on the
    IPUs; no ``torch.distributed`` process group and no DistributedSampler are involved.
    Gradient accumulation happens on the IPU as well: one Trainer batch is ``device_iterations x
    replicas x gradient_accumulation`` micro-batches (the dataloaders are rebuilt as
    ``poptorch.DataLoader``), and the Trainer counts one optimizer step per batch
    (:attr:`handles_gradient_accumulation`).

    Each step method is compiled once, on first use (``training_step`` with
    ``poptorch.trainingModel``, the others with ``poptorch.inferenceModel``). Only one compiled
    model holds the IPUs at a time: switching between training and validation detaches one and
    attaches the other, and the trained weights are copied through the host. The host copy of the
    weights is brought up to date before checkpoints and at the end of every run.

    Args:
        device_iterations: Training steps the IPUs run per call, without returning to the host.
        gradient_accumulation: Micro-batches accumulated on the IPU per optimizer step; by default
            the Trainer's ``accumulate_grad_batches``.
        training_options: A ``poptorch.Options`` to use as it is for training (it wins over the
            arguments above and ``devices=``).
        inference_options: A ``poptorch.Options`` for validation, test and predict; by default
            derived from the training options, consuming the same micro-batches per call.
        accelerator, precision, checkpoint_io: As for :class:`torchplug.Strategy`.

    Raises:
        MisconfigurationError: A count is not a positive int.
    """

    #: One process drives ``devices=N`` replicas, so the core must accept N > 1.
    is_distributed: ClassVar[bool] = True
    #: The IPU accumulates gradients inside the compiled step: the Trainer steps every batch.
    handles_gradient_accumulation: ClassVar[bool] = True

    def __init__(
        self,
        device_iterations: int = 1,
        gradient_accumulation: int | None = None,
        training_options: Any | None = None,
        inference_options: Any | None = None,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        _check_count("device_iterations", device_iterations)
        if gradient_accumulation is not None:
            _check_count("gradient_accumulation", gradient_accumulation)
        # The host is the root device: the model and batches stay on the CPU, PopTorch copies them to the IPUs.
        super().__init__("cpu", accelerator=accelerator, precision=precision, checkpoint_io=checkpoint_io)
        self.device_iterations = device_iterations
        self.gradient_accumulation = gradient_accumulation
        self._training_options = training_options
        self._inference_options = inference_options
        self._executors: dict[str, Any] = {}
        self._versions: dict[str, int] = {}  # the host weights' version each compiled model holds
        self._host_version = 0
        self._device_ahead = False  # the training model's weights are newer than the host's
        self._pushed: list[dict[str, Any]] | None = None  # optimizer settings the training model has

    @property
    @override
    def own_devices(self) -> list[torch.device] | None:
        """None: the IPUs are the Trainer's ``devices=``; the host device (the CPU) is not a choice of the user."""
        return None

    # -- one process (the rank properties and collectives of SingleDeviceStrategy) -------------------

    @property
    @override
    def distributed_sampler_kwargs(self) -> None:
        """None: never a DistributedSampler; the replicas split each combined batch on the IPUs."""
        return None

    @property
    def replication_factor(self) -> int:
        """Model replicas, one per IPU: the training options' when given, else ``devices=``."""
        if self._training_options is not None:
            return int(self._training_options.replication_factor)
        return len(self.parallel_devices) if self.parallel_devices else 1

    @property
    def accumulation(self) -> int:
        """Micro-batches accumulated per optimizer step (the options', the argument, or the Trainer's)."""
        if self._training_options is not None:
            return int(self._training_options.Training.gradient_accumulation)
        if self.gradient_accumulation is not None:
            return self.gradient_accumulation
        try:
            trainer = self.module.trainer if self.module is not None else None
        except RuntimeError:  # a Module not attached to a Trainer
            trainer = None
        return int(getattr(trainer, "accumulate_grad_batches", 1))

    # -- PopTorch options ---------------------------------------------------------------------------

    @property
    def training_options(self) -> Any:
        """The ``poptorch.Options`` of the training model (built on first use, then fixed)."""
        if self._training_options is None:
            self._training_options = self._options(self.device_iterations, self.accumulation, training=True)
        return self._training_options

    @property
    def inference_options(self) -> Any:
        """The ``poptorch.Options`` of the other steps: the training options' micro-batches per call, no accumulation.

        Raises:
            MisconfigurationError: Given inference options consume another number of micro-batches
                per call than the training options (the dataloaders are batched for the latter).
        """
        training = self.training_options
        if self._inference_options is None:
            iterations = int(training.device_iterations * training.Training.gradient_accumulation)
            self._inference_options = self._options(iterations, 1, training=False)
        elif micro_batches(self._inference_options) != micro_batches(training):
            raise MisconfigurationError(
                f"inference_options consume {micro_batches(self._inference_options)} micro-batches per call and "
                f"the training options {micro_batches(training)}, but every dataloader is batched for the training "
                "options. Hint: make device_iterations x replicas x gradient_accumulation equal in both."
            )
        return self._inference_options

    def _options(self, iterations: int, accumulation: int, training: bool) -> Any:
        options = _vendor.import_poptorch().Options()
        options.deviceIterations(iterations)
        options.replicationFactor(self.replication_factor)
        options.Training.gradientAccumulation(accumulation)
        seed = env_int("TORCHPLUG_GLOBAL_SEED", None, minimum=0, maximum=2**32 - 1)
        if seed is not None:
            options.randomSeed(seed)
        if isinstance(self.precision, IPUPrecision):
            self.precision.configure_options(options, training)
        return options

    # -- set-up -------------------------------------------------------------------------------------

    @override
    def precision_for(self, precision: str) -> str:
        """The IPU precision for the user's name (unsupported names are refused with the choices)."""
        return ipu_precision_name(precision)

    @override
    def configure_launcher(self) -> None:
        """No launcher (one process); checks that the accelerator is the IPU and that there is one node."""
        if self.accelerator is None or self.accelerator.device_type != "ipu":
            raise MisconfigurationError(
                "strategy='ipu' compiles the model for IPUs, but the accelerator is "
                f"{type(self.accelerator).__name__}. Hint: use accelerator='ipu'."
            )
        if self.num_nodes != 1:
            raise MisconfigurationError(
                f"strategy='ipu' drives the IPUs of one host, but num_nodes={self.num_nodes}. Hint: use num_nodes=1; "
                "for IPU-PODs spanning hosts, start one process per host with poprun and pass training_options "
                "with Distributed settings."
            )

    @override
    def setup(self, configure_optimizers: Callable[[], list[Optimizer]] | None = None) -> None:
        """Convert the module and create the optimizer; the steps compile later, on first use.

        Raises:
            MisconfigurationError: Manual optimization, or not exactly one optimizer.
        """
        self._release()
        super().setup(configure_optimizers)
        if configure_optimizers is None:
            return
        if not getattr(self.module, "automatic_optimization", True):
            raise MisconfigurationError(
                "automatic_optimization=False is not supported on IPUs: PopTorch compiles backward and the "
                "optimizer step into the training step. Hint: return the loss from training_step."
            )
        if len(self.optimizers) != 1:
            raise MisconfigurationError(
                f"IPUs train with one optimizer, but configure_optimizers returned {len(self.optimizers)}."
            )

    @override
    def model_to_device(self) -> None:
        """Nothing to move: the model stays on the host, and PopTorch copies its weights to the IPUs."""

    @override
    def process_dataloader(self, dataloader: Iterable[Any]) -> Iterable[Any]:
        """Rebuild the loader as a ``poptorch.DataLoader`` with the training options (see ``_data.py``)."""
        return poptorch_loader(dataloader, self.training_options)

    @override
    def batch_to_device(self, batch: Any, device: torch.device | None = None) -> Any:
        """Keep the batch on the host (PopTorch copies it to the IPUs); only the precision converts it."""
        return self.precision.convert_input(batch) if self.precision is not None else batch

    # -- steps ----------------------------------------------------------------------------------------

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run one compiled training call: forward, backward and optimizer step on the IPUs.

        Returns the loss (averaged over the replicas), for logging and the progress bar.
        """
        executor = self._use(_TRAIN)
        self._push_optimizer(executor)
        args, kwargs = tensor_arguments(args, kwargs, micro_batches(self.training_options))
        output = executor(*args, **kwargs)
        self._device_ahead = True
        return output.float().mean() if isinstance(output, torch.Tensor) else output

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled ``validation_step`` on the IPUs."""
        return self._evaluate("validation_step", args, kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled ``test_step`` on the IPUs."""
        return self._evaluate("test_step", args, kwargs)

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled ``predict_step`` on the IPUs; float16 outputs come back as float32."""
        return self._evaluate("predict_step", args, kwargs)

    def _evaluate(self, step_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        executor = self._use(step_name)
        args, kwargs = tensor_arguments(args, kwargs, micro_batches(self.training_options))
        output = executor(*args, **kwargs)
        return self.precision.convert_output(output) if self.precision is not None else output

    @override
    def backward(self, loss: torch.Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: PopTorch computed the gradients inside the compiled training step."""

    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Run the closure (the compiled step, which also stepped the optimizer on the IPUs); return its result.

        The host optimizer's ``step()`` is then called with no gradient on the host, which changes
        nothing, so that learning-rate schedulers know the step happened.
        """
        result = closure() if closure is not None else None
        if all(p.grad is None for group in optimizer.param_groups for p in group["params"]):
            optimizer.step()
        return result

    @override
    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Refuse: the gradients never leave the IPU.

        Raises:
            MisconfigurationError: Always, with the alternative.
        """
        raise MisconfigurationError(NO_CLIPPING)

    # -- the compiled models ----------------------------------------------------------------------------

    def _use(self, step_name: str) -> Any:
        """The compiled model of ``step_name``, holding the IPUs and the latest weights."""
        if step_name != _TRAIN and self._device_ahead:
            self._copy_to_host()
        executor = self._executors.get(step_name) or self._create(step_name)
        for other in self._executors.values():
            if other is not executor and other.isCompiled() and other.isAttachedToDevice():
                other.detachFromDevice()
        if executor.isCompiled():
            if not executor.isAttachedToDevice():
                executor.attachToDevice()
            if self._versions[step_name] != self._host_version:
                executor.copyWeightsToDevice()
        self._versions[step_name] = self._host_version
        return executor

    def _create(self, step_name: str) -> Any:
        assert self.module is not None and self.precision is not None, "setup() runs before the steps"
        poptorch = _vendor.import_poptorch()
        step = StepModule(self.module, step_name, self.precision)
        if step_name == _TRAIN:
            optimizer = self.optimizers[0]
            executor = poptorch.trainingModel(step, options=self.training_options, optimizer=optimizer)
            self._pushed = _settings(optimizer)
        else:
            executor = poptorch.inferenceModel(step, options=self.inference_options)
        self._executors[step_name] = executor
        self._versions[step_name] = self._host_version
        return executor

    def _push_optimizer(self, executor: Any) -> None:
        """Give the IPUs the optimizer's new settings (a learning-rate scheduler changed them on the host)."""
        settings = _settings(self.optimizers[0])
        if settings != self._pushed:
            executor.setOptimizer(self.optimizers[0])
            self._pushed = settings

    def _copy_to_host(self) -> None:
        self._executors[_TRAIN].copyWeightsToHost()
        self._host_version += 1
        self._versions[_TRAIN] = self._host_version
        self._device_ahead = False

    def _release(self) -> None:
        """Bring the host weights up to date, then detach and destroy every compiled model."""
        if self._device_ahead:
            self._copy_to_host()
        for executor in self._executors.values():
            if executor.isCompiled() and executor.isAttachedToDevice():
                executor.detachFromDevice()
            executor.destroy()
        self._executors.clear()
        self._versions.clear()
        self._pushed = None

    # -- checkpoints and the end -----------------------------------------------------------------------

    @override
    def module_state_dict(self) -> dict[str, Any]:
        """The module's state dict, after copying the trained weights from the IPUs to the host."""
        if self._device_ahead:
            self._copy_to_host()
        return super().module_state_dict()

    @override
    def load_module_state_dict(self, state_dict: Any, strict: bool = True) -> None:
        """Load into the host module; each compiled model receives the weights before its next call."""
        super().load_module_state_dict(state_dict, strict)
        self._device_ahead = False
        self._host_version += 1

    @override
    def teardown(self) -> None:
        """Copy the trained weights into the user's model, release the IPUs, then tear down the components."""
        self._release()
        super().teardown()

    @override
    def __repr__(self) -> str:
        return (
            f"IPUStrategy(device_iterations={self.device_iterations}, "
            f"gradient_accumulation={self.gradient_accumulation})"
        )


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MisconfigurationError(f"{name}={value!r} is not valid: give a positive int.")


def _settings(optimizer: Optimizer) -> list[dict[str, Any]]:
    """The optimizer's hyper-parameters per group (not the parameters), comparable with ``==``."""
    return [
        {
            key: value.tolist() if isinstance(value, torch.Tensor) else value
            for key, value in group.items()
            if key != "params"
        }
        for group in optimizer.param_groups
    ]
