"""The core's own plugins, registered through the same hooks as every third-party plugin.

Like any plugin module, this one imports nothing heavy: it registers dotted paths only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.hookspecs import hookimpl

if TYPE_CHECKING:
    from torchplug._registry import Registry
    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.precision.precision import Precision
    from torchplug.strategies.strategy import Strategy

_DDP = "torchplug.strategies.ddp:DDPStrategy"
_LAUNCHES = {
    "ddp": ("popen", "re-runs the script once per local rank, as torchrun does"),
    "ddp_spawn": ("spawn", "starts fresh worker processes (needs picklable model and data)"),
    "ddp_fork": ("fork", "forks workers: works in notebooks"),
}


@hookimpl
def torchplug_register_accelerators(registry: Registry[Accelerator]) -> None:
    registry.register(
        "cpu", "torchplug.accelerators.cpu:CPUAccelerator", description="The CPU; devices=N runs N processes"
    )


@hookimpl
def torchplug_register_strategies(registry: Registry[Strategy]) -> None:
    registry.register(
        "single_device",
        "torchplug.strategies.single_device:SingleDeviceStrategy",
        description="One process on one device",
    )
    for name, (start_method, how) in _LAUNCHES.items():
        aliases = ("ddp_notebook",) if name == "ddp_fork" else ()
        registry.register(
            name, _DDP, description=f"DistributedDataParallel; {how}", aliases=aliases, start_method=start_method
        )
        for flag in (True, False):
            suffix = str(flag).lower()
            registry.register(
                f"{name}_find_unused_parameters_{suffix}",
                _DDP,
                description=f"{name} with find_unused_parameters={flag}",
                start_method=start_method,
                find_unused_parameters=flag,
            )
    registry.register(
        "fsdp",
        "torchplug.strategies.fsdp:FSDPStrategy",
        description="Fully sharded data parallel (torch FSDP2 fully_shard)",
    )
    registry.register(
        "fsdp_cpu_offload",
        "torchplug.strategies.fsdp:FSDPStrategy",
        description="FSDP with parameters and gradients offloaded to the CPU",
        cpu_offload=True,
    )


@hookimpl
def torchplug_register_precisions(registry: Registry[Precision]) -> None:
    registry.register(
        "64-true",
        "torchplug.precision.double:DoublePrecision",
        aliases=("64", "double"),
        description="float64 weights and compute",
    )
    registry.register(
        "32-true",
        "torchplug.precision.precision:Precision",
        aliases=("32",),
        description="float32 weights and compute (the default)",
    )
    registry.register(
        "16-mixed",
        "torchplug.precision.amp:MixedPrecision",
        aliases=("16",),
        description="float16 autocast with a gradient scaler, float32 weights",
        precision="16-mixed",
    )
    registry.register(
        "bf16-mixed",
        "torchplug.precision.amp:MixedPrecision",
        aliases=("bf16",),
        description="bfloat16 autocast, float32 weights",
        precision="bf16-mixed",
    )
    registry.register(
        "16-true",
        "torchplug.precision.half:HalfPrecision",
        aliases=("half",),
        description="float16 weights and compute",
        precision="16-true",
    )
    registry.register(
        "bf16-true",
        "torchplug.precision.half:HalfPrecision",
        description="bfloat16 weights and compute",
        precision="bf16-true",
    )


@hookimpl
def torchplug_register_checkpoint_io(registry: Registry[CheckpointIO]) -> None:
    registry.register(
        "torch",
        "torchplug.io.torch_io:TorchCheckpointIO",
        description="torch.save/torch.load through fsspec, written atomically",
    )
    registry.register(
        "async",
        "torchplug.io.async_io:AsyncCheckpointIO",
        description="Snapshots on the training thread, writes in the background",
    )


@hookimpl
def torchplug_register_cluster_environments(registry: Registry[ClusterEnvironment]) -> None:
    registry.register(
        "local",
        "torchplug.environments.local:LocalEnvironment",
        description="This machine; ranks from torchplug's launchers or LOCAL_RANK",
    )
    registry.register(
        "torchelastic",
        "torchplug.environments.torchelastic:TorchElasticEnvironment",
        description="Processes started by torchrun / torch.distributed.elastic",
    )
    registry.register(
        "kubeflow",
        "torchplug.environments.kubeflow:KubeflowEnvironment",
        description="Kubeflow PyTorchJob, one process per pod",
    )
    registry.register(
        "lsf", "torchplug.environments.lsf:LSFEnvironment", description="IBM Spectrum LSF jobs started with jsrun"
    )
    registry.register(
        "mpi",
        "torchplug.environments.mpi:MPIEnvironment",
        description="Processes started by mpirun (Open MPI, MPICH, Intel MPI)",
    )
