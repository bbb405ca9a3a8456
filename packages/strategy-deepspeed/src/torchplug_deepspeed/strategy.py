"""DeepSpeed ZeRO: optimizer state (stage 1), gradients (2) and parameters (3) partitioned over the processes.

The strategy builds on the core's DDP strategy: the same launchers, cluster environments and
process group (torchplug joins it; DeepSpeed uses it as it is). DeepSpeed's accelerator is set
from the Trainer's before deepspeed is imported. The Trainer's loop keeps control of the step:
DeepSpeed runs with caller-owned gradient accumulation (``managed_gradient_accumulation=false``),
so ``accumulate_grad_batches`` means what it means with DDP.

Checkpoints with training state are directories written by DeepSpeed's own sharded
``save_checkpoint`` (every process writes its shard) and read back by its ``load_checkpoint``;
weights-only checkpoints are one ordinary file. :func:`torchplug_deepspeed.consolidate` turns a
directory into one ordinary checkpoint file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Generator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Final

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import MisconfigurationError
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.ddp import DDPStrategy
from torchplug_deepspeed import _vendor
from torchplug_deepspeed._config import build_config, finalize_config, load_config, offloads_optimizer, zero_stage
from torchplug_deepspeed.precision import PRECISIONS, DeepSpeedPrecision

__all__ = ["CHECKPOINT_TAG", "DeepSpeedStrategy", "is_deepspeed_checkpoint"]

#: The tag (sub-directory) DeepSpeed writes each checkpoint under, as Lightning does.
CHECKPOINT_TAG: Final = "checkpoint"


class _LoadedByDeepSpeed(dict):  # type: ignore[type-arg]
    """Stands for a state that DeepSpeed's ``load_checkpoint`` has restored already."""


def is_deepspeed_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a checkpoint directory written by DeepSpeed (it holds a ``latest`` file or a tag)."""
    directory = Path(path)
    return directory.is_dir() and ((directory / "latest").is_file() or (directory / CHECKPOINT_TAG).is_dir())


class DeepSpeedStrategy(DDPStrategy):
    """Train with DeepSpeed's ZeRO, on any accelerator DeepSpeed supports (the CPU included).

    The configuration comes from ``config`` (a dict, or the path of a JSON file) or, without it,
    from the arguments. The Trainer's ``accumulate_grad_batches``, ``gradient_clip_val`` and
    ``precision`` are written into it; a config that contradicts them is refused.

    Args:
        accelerator: As for :class:`~torchplug.strategies.ddp.DDPStrategy`.
        zero_optimization: Use ZeRO (False: stage 0, plain data parallelism through DeepSpeed).
        stage: The ZeRO stage: 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters.
        offload_optimizer: Keep the optimizer state on ``offload_optimizer_device`` and step there.
        offload_parameters: Stage 3: keep the parameters on ``offload_params_device`` between uses.
        config: A DeepSpeed config dict or JSON file path (https://www.deepspeed.ai/docs/config-json/);
            it replaces every ZeRO argument.
        logging_batch_size_per_gpu: DeepSpeed's ``train_micro_batch_size_per_gpu`` (its throughput
            logs): ``"auto"`` takes the training DataLoader's batch size.
        logging_level: The level of DeepSpeed's logger.
        start_method, precision, checkpoint_io, cluster_environment, parallel_devices,
            process_group_backend, timeout: As for :class:`~torchplug.strategies.ddp.DDPStrategy`.
        **zero_options: The other arguments of Lightning's ``DeepSpeedStrategy``, with the same names
            and defaults (``offload_optimizer_device``, ``pin_memory``, ``overlap_comm``,
            ``reduce_bucket_size``, ``zero_force_ds_cpu_optimizer``, ``loss_scale``...; see
            the README's table).
    """

    restore_checkpoint_after_setup: ClassVar[bool] = True

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        zero_optimization: bool = True,
        stage: int = 2,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        logging_batch_size_per_gpu: str | int = "auto",
        logging_level: int = logging.WARN,
        start_method: str = "popen",
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        **zero_options: Any,
    ) -> None:
        super().__init__(
            start_method=start_method,
            find_unused_parameters=False,
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        arguments = {
            "zero_optimization": zero_optimization,
            "stage": stage,
            "offload_optimizer": offload_optimizer,
            "offload_parameters": offload_parameters,
            "logging_batch_size_per_gpu": logging_batch_size_per_gpu,
            **zero_options,
        }
        #: The config before the Trainer's settings are written in (see :attr:`config` for the final one).
        self.base_config: dict[str, Any] = build_config(load_config(config), arguments)
        #: The config handed to ``deepspeed.initialize`` (set by :meth:`setup`).
        self.config: dict[str, Any] = dict(self.base_config)
        self.logging_batch_size_per_gpu = logging_batch_size_per_gpu
        self.zero_force_ds_cpu_optimizer = zero_options.get("zero_force_ds_cpu_optimizer")
        self.logging_level = logging_level
        self._engine: Any = None

    # -- availability and names ---------------------------------------------------------------

    @staticmethod
    def is_available() -> bool:
        """Whether deepspeed is installed."""
        return _vendor.probe() is None

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why DeepSpeed cannot run here (deepspeed missing), or None."""
        return _vendor.probe()

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage in use (0: ZeRO off)."""
        return zero_stage(self.base_config)

    @property
    def zero_stage_3(self) -> bool:
        """Whether parameters are partitioned (ZeRO stage 3)."""
        return self.zero_stage == 3

    @property
    def deepspeed_engine(self) -> Any:
        """The ``deepspeed.DeepSpeedEngine`` of the last set-up (None before the first).

        It outlives the run, as in Lightning, so that ``trainer.save_checkpoint(...)`` after
        ``fit`` still writes a DeepSpeed checkpoint.
        """
        return self._engine

    @override
    def precision_for(self, precision: str) -> str:
        """DeepSpeed's plugin for a precision name (``"bf16-mixed"`` -> ``"deepspeed-bf16-mixed"``)."""
        name = precision.removeprefix("deepspeed-")
        if name not in PRECISIONS:
            raise MisconfigurationError(
                f"precision={precision!r} is not supported by DeepSpeed. Supported: {', '.join(PRECISIONS)}."
            )
        return f"deepspeed-{name}"

    # -- set-up -------------------------------------------------------------------------------

    @override
    def configure_launcher(self) -> None:
        """Refuse components DeepSpeed cannot drive, then set the launcher as DDP does.

        The plain float32 precision (what ``attach`` gives when none is named) becomes
        ``DeepSpeedPrecision("32-true")``; any other non-DeepSpeed precision, and a checkpoint IO
        other than the core's ``torch`` one, are refused.
        """
        assert self.accelerator is not None
        if type(self.precision) is Precision:
            self.precision = DeepSpeedPrecision("32-true")
            self.precision.connect_accelerator(self.accelerator)
        if not isinstance(self.precision, DeepSpeedPrecision):
            raise MisconfigurationError(
                f"DeepSpeedStrategy needs a DeepSpeedPrecision, got {type(self.precision).__name__}. Hint: pass "
                "precision='bf16-mixed' (or another name) instead of an instance, or DeepSpeedPrecision(...)."
            )
        if self.has_checkpoint_io and not isinstance(self.checkpoint_io, TorchCheckpointIO):
            raise MisconfigurationError(
                f"DeepSpeedStrategy writes its sharded checkpoints itself and cannot honour "
                f"{type(self.checkpoint_io).__name__}. Hint: leave the checkpoint IO at its default ('torch')."
            )
        super().configure_launcher()

    @override
    def setup_environment(self) -> None:
        """Point DeepSpeed at the Trainer's accelerator, then join the process group."""
        assert isinstance(self.precision, DeepSpeedPrecision)
        accelerator = _vendor.use_accelerator(self.root_device.type)
        if self.precision.dtype is torch.float16 and not accelerator.is_fp16_supported():
            raise MisconfigurationError(
                f"precision={self.precision.precision!r}: DeepSpeed's {self.root_device.type} accelerator has "
                "no float16 support on this machine. Hint: precision='bf16-mixed'."
            )
        logging.getLogger("DeepSpeed").setLevel(self.logging_level)
        super().setup_environment()

    @override
    def setup(self, configure_optimizers: Callable[[], list[Optimizer]] | None = None) -> None:
        """Convert the module, create the optimizer, and wrap both in a DeepSpeed engine."""
        assert self.module is not None and isinstance(self.precision, DeepSpeedPrecision)
        self.module = self.precision.convert_module(self.module)
        self.model = self.module
        if not self._offloads_parameters():
            self.model_to_device()
        self.optimizers = configure_optimizers() if configure_optimizers is not None else []
        if len(self.optimizers) > 1:
            raise MisconfigurationError(
                f"configure_optimizers() returned {len(self.optimizers)} optimizers; DeepSpeed trains with one."
            )
        self.config = self._final_config(training=bool(self.optimizers))
        self._release_engine()
        deepspeed = _vendor.deepspeed()
        engine, *_ = deepspeed.initialize(
            model=self.module,
            optimizer=self.optimizers[0] if self.optimizers else None,
            model_parameters=[p for p in self.module.parameters() if p.requires_grad] if self.optimizers else None,
            config=self.config,
            dist_init_required=False,
        )
        self.model = self._engine = engine

    def _release_engine(self) -> None:
        if self._engine is not None:
            self._engine.destroy()  # ZeRO-3: removes its hooks from the module before a new engine adds its own
            self._engine = None

    def _offloads_parameters(self) -> bool:
        zero = self.base_config.get("zero_optimization") or {}
        offload = zero.get("offload_param") if isinstance(zero, Mapping) else None
        return isinstance(offload, Mapping) and offload.get("device", "none") not in (None, "none")

    def _final_config(self, training: bool) -> dict[str, Any]:
        assert isinstance(self.precision, DeepSpeedPrecision)
        trainer = _trainer_of(self.module)
        config = finalize_config(
            self.base_config,
            numerics=self.precision.ds_config(),
            precision=self.precision.precision,
            clip_val=getattr(trainer, "gradient_clip_val", None) if training else None,
            clip_algorithm=getattr(trainer, "gradient_clip_algorithm", "norm"),
            micro_batch_size=self._micro_batch_size(trainer, training),
            optimizer_on_cpu=self.root_device.type == "cpu" and self.zero_force_ds_cpu_optimizer is None,
        )
        if not training:  # evaluation: no optimizer, so nothing to partition but the stage-3 parameters
            keep = {"zero_optimization", "fp16", "bf16", "train_micro_batch_size_per_gpu", "train_batch_size"}
            config = {k: v for k, v in config.items() if k in keep}
            if not self.zero_stage_3:
                config.pop("zero_optimization", None)
            else:
                config["zero_optimization"] = {
                    k: v for k, v in config["zero_optimization"].items() if k != "offload_optimizer"
                }
        elif offloads_optimizer(config) and self.zero_force_ds_cpu_optimizer is not None:
            config["zero_force_ds_cpu_optimizer"] = self.zero_force_ds_cpu_optimizer
        return config

    def _micro_batch_size(self, trainer: Any, training: bool) -> int:
        if self.logging_batch_size_per_gpu != "auto":
            return int(self.logging_batch_size_per_gpu)
        if trainer is None:
            return 1
        if training and trainer.train_dataloader is None:
            # The fit loop requests train_dataloader() only after the sanity check (Lightning's order); the
            # engine is built before. Reading the step estimate requests it now, once (as Lightning does here).
            trainer.estimated_stepping_batches  # noqa: B018
        loader = trainer.train_dataloader
        size = getattr(loader, "batch_size", None)
        return size if isinstance(size, int) and size > 0 else 1

    # -- steps --------------------------------------------------------------------------------

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``training_step`` through the engine's forward (ZeRO-3 gathers parameters, hooks are set)."""
        return self._step("training_step", args, kwargs)

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``validation_step`` through the engine's forward."""
        return self._step("validation_step", args, kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``test_step`` through the engine's forward."""
        return self._step("test_step", args, kwargs)

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``predict_step`` through the engine's forward."""
        return self._step("predict_step", args, kwargs)

    def _step(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert self.precision is not None and self.module is not None and self.model is not None
        with self.precision.forward_context():
            return _call_as_forward(self.model, self.module, name, args, kwargs)

    @override
    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Nothing to do here: DeepSpeed clips by norm inside its step, at the value set up from the Trainer.

        Raises:
            MisconfigurationError: ``clip_val`` or ``algorithm`` differ from what DeepSpeed was set up with.
        """
        configured = float(self.config.get("gradient_clipping", 0.0))
        if algorithm != "norm" or float(clip_val) != configured:
            raise MisconfigurationError(
                f"clip_gradients(clip_val={clip_val!r}, algorithm={algorithm!r}): DeepSpeed clips by norm inside "
                f"its step, set up with gradient_clipping={configured!r}. Hint: Trainer(gradient_clip_val=...)."
            )

    @override
    def zero_grad(self, optimizer: Optimizer, set_to_none: bool = True) -> None:
        """Nothing: ``engine.step()`` resets the gradients, in buffers that DeepSpeed's optimizer owns.

        ``optimizer`` is the one ``configure_optimizers`` returned; DeepSpeed has replaced its
        parameters with its own partitions, whose gradient buffers must not be dropped.
        """

    # -- checkpoints --------------------------------------------------------------------------

    @override
    def module_state_dict(self) -> dict[str, Any]:
        """The full state dict: with ZeRO-3 gathered layer by layer to rank 0's CPU memory (empty elsewhere).

        Every process must call it (ZeRO-3 gathers with collectives).
        """
        engine = self.deepspeed_engine
        if engine is not None and self.zero_stage_3:
            gathered = engine._zero3_consolidated_16bit_state_dict()
            return dict(gathered) if gathered is not None else {}
        return super().module_state_dict()

    @override
    def load_module_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Load a full state dict into the (partitioned) module; nothing when DeepSpeed loaded the weights itself."""
        if isinstance(state_dict, _LoadedByDeepSpeed):
            return
        assert self.module is not None
        engine = self.deepspeed_engine
        if engine is not None and self.zero_stage_3:
            deepspeed = _vendor.deepspeed()
            with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=0):
                if self.is_global_zero:
                    self.module.load_state_dict(state_dict, strict=strict)
        else:
            self.module.load_state_dict(state_dict, strict=strict)
        refresh = getattr(getattr(engine, "optimizer", None), "refresh_fp32_params", None)
        if callable(refresh):
            refresh()  # the float32 master weights follow the loaded ones

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """A placeholder: DeepSpeed saves the partitioned optimizer state itself, in the checkpoint directory."""
        return {"saved_by": "deepspeed"}

    @override
    def load_optimizer_state_dict(self, optimizer: Optimizer, state_dict: Mapping[str, Any]) -> None:
        """Nothing when DeepSpeed restored the optimizer itself; a full optimizer state cannot be partitioned.

        Raises:
            MisconfigurationError: The checkpoint is an ordinary file with a full optimizer state.
        """
        if isinstance(state_dict, _LoadedByDeepSpeed):
            return
        raise MisconfigurationError(
            "fit(ckpt_path=...) names an ordinary checkpoint file, whose optimizer state DeepSpeed cannot partition. "
            "Hint: resume from a checkpoint directory written by a DeepSpeed strategy, or load the weights alone "
            "(Module.load_from_checkpoint) and start a new fit."
        )

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any | None = None) -> None:
        """Write a DeepSpeed checkpoint directory at ``filepath`` (every process writes its shard).

        A checkpoint without training state (``weights_only``) is one ordinary file, written by
        rank 0 through the checkpoint IO. A directory is written beside its final name and moved
        there once complete, so an interrupted save leaves the previous checkpoint whole.
        """
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r}: DeepSpeed writes its checkpoints itself, to local paths."
            )
        if "accumulated_gradients" in checkpoint:
            raise MisconfigurationError(
                f"save_checkpoint({filepath!r}) falls in the middle of gradient accumulation: DeepSpeed holds the "
                "partly reduced gradients inside its engine and cannot save them, so the run could not resume "
                "exactly. Hint: save after an optimizer step (ModelCheckpoint(every_n_train_steps=...) does)."
            )
        engine = self.deepspeed_engine
        if "optimizer_states" not in checkpoint or engine is None:
            super().save_checkpoint(checkpoint, filepath)
            return
        target = Path(_local_path(filepath))
        staging = self.broadcast(str(target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")))
        client_state = {k: v for k, v in checkpoint.items() if k not in ("state_dict", "optimizer_states")}
        engine.save_checkpoint(staging, tag=CHECKPOINT_TAG, client_state=client_state)
        self.barrier("deepspeed_save")
        if self.is_global_zero:
            _replace_directory(Path(staging), target)
        self.barrier("deepspeed_save_done")

    @override
    def load_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        """Restore a DeepSpeed checkpoint directory through DeepSpeed (weights, optimizer, loss scale).

        Returns the checkpoint's other entries (loops, schedulers, callbacks, RNG states...) for the
        Trainer. Without an optimizer (validate, test, predict) the directory is consolidated into
        full float32 weights instead (see :func:`torchplug_deepspeed.consolidate`). An ordinary
        checkpoint file is read through the checkpoint IO (its weights are loaded by
        :meth:`load_module_state_dict`).
        """
        engine = self.deepspeed_engine
        if engine is None or not is_deepspeed_checkpoint(_local_path(path)):
            return super().load_checkpoint(path, weights_only)
        if not self.optimizers:
            # Evaluation: DeepSpeed's engine without an optimizer cannot read ZeRO-3 shards (the weights
            # live in the optimizer files), so every process merges them with zero_to_fp32 and loads
            # the full weights through load_module_state_dict.
            from torchplug_deepspeed._checkpoint import consolidated_checkpoint

            return consolidated_checkpoint(_local_path(path))
        loaded, client_state = engine.load_checkpoint(
            _local_path(path),
            tag=None,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
            load_module_strict=True,
        )
        if loaded is None or client_state is None:
            raise MisconfigurationError(
                f"DeepSpeed could not load the checkpoint at {path!r}. Hint: it must be a directory written by a "
                "DeepSpeed strategy with the same ZeRO stage and number of processes."
            )
        checkpoint = dict(client_state)
        checkpoint["state_dict"] = _LoadedByDeepSpeed()
        checkpoint["optimizer_states"] = [_LoadedByDeepSpeed() for _ in self.optimizers]
        return checkpoint

    # -- contexts and the end -------------------------------------------------------------------

    @override
    @contextlib.contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        """With ZeRO-3, layers built inside are partitioned at creation (``deepspeed.zero.Init``).

        Needs the process group: use it after the Trainer's set-up (for example in ``setup()`` of the module).
        """
        if not self.zero_stage_3:
            yield
            return
        assert isinstance(self.precision, DeepSpeedPrecision)
        config = {
            "zero_optimization": self.base_config["zero_optimization"],
            "train_micro_batch_size_per_gpu": 1,
            **self.precision.ds_config(),
        }
        deepspeed = _vendor.deepspeed()
        with deepspeed.zero.Init(config_dict_or_path=config, enabled=True):
            yield

    @override
    def teardown(self) -> None:
        """Tear down the precision, IO and accelerator; the engine stays for saves after the run (see above).

        With ZeRO-3 the module's parameters stay partitioned after the run, as with FSDP: read
        the weights with :meth:`module_state_dict` (every process calls it) or from a checkpoint.
        """
        super().teardown()

    def __repr__(self) -> str:
        return f"DeepSpeedStrategy(stage={self.zero_stage}, start_method={self.start_method!r})"


def _trainer_of(module: Any) -> Any:
    """The Trainer running ``module`` (None for a plain ``torch.nn.Module`` or outside a run)."""
    try:
        return module.trainer
    except (AttributeError, RuntimeError):
        return None


def _call_as_forward(engine: Any, module: torch.nn.Module, method: str, args: Any, kwargs: Any) -> Any:
    """Call ``module.<method>`` through ``engine(...)``: DeepSpeed's forward pre/post work runs around it."""
    had_own = "forward" in module.__dict__
    original = module.forward

    def redirected(*inner_args: Any, **inner_kwargs: Any) -> Any:
        _restore(module, had_own, original)  # nested self(x) calls see the real forward
        return getattr(module, method)(*inner_args, **inner_kwargs)

    module.forward = redirected  # type: ignore[method-assign]
    try:
        return engine(*args, **kwargs)
    finally:
        _restore(module, had_own, original)


def _restore(module: torch.nn.Module, had_own: bool, original: Any) -> None:
    if had_own:
        module.forward = original  # type: ignore[method-assign]
    else:
        module.__dict__.pop("forward", None)


def _local_path(path: str) -> str:
    """``path`` as a local filesystem path (DeepSpeed writes with ``torch.save`` to paths).

    Raises:
        MisconfigurationError: ``path`` is a URL of a remote filesystem.
    """
    text = os.fspath(path)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme != "file":
            raise MisconfigurationError(
                f"DeepSpeed checkpoints are written with torch.save to local paths; {text!r} is a {scheme!r} URL. "
                "Hint: checkpoint to a local or mounted directory."
            )
        return rest
    return text


def _replace_directory(staging: Path, target: Path) -> None:
    """Move the finished ``staging`` directory to ``target``, then delete the checkpoint it replaces."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
