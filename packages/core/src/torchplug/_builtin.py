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
    from torchplug.loggers.logger import Logger
    from torchplug.precision.precision import Precision
    from torchplug.strategies.strategy import Strategy

_DDP = "torchplug.strategies.ddp:DDPStrategy"
_LAUNCHES = {
    "ddp": ("popen", "re-runs the script once per local rank, as torchrun does"),
    "ddp_spawn": ("spawn", "starts fresh worker processes (needs picklable model and data)"),
    "ddp_fork": ("fork", "forks workers: works in notebooks"),
}

_FAIRSCALE = {
    "ddp_sharded": "DDPShardedStrategy",
    "ddp_sharded_spawn": "DDPSpawnShardedStrategy",
    "ddp_fully_sharded": "DDPFullyShardedStrategy",
}


@hookimpl
def torchplug_register_accelerators(registry: Registry[Accelerator]) -> None:
    registry.register(
        "cpu", "torchplug.accelerators.cpu:CPUAccelerator", description="The CPU; devices=N runs N processes"
    )
    # The generic accelerator: whatever device torch.accelerator reports, when no plugin claims its type.
    # Its probe only checks that torch is installed: listing never imports torch, the rest is asked on use.
    registry.register(
        "torch",
        "torchplug.accelerators.torch_device:TorchDeviceAccelerator",
        description="Whatever device torch.accelerator reports, unless a plugin claims its type; probed on use",
        probe="torchplug.accelerators._torch_backends:probe",
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
    # Names of the original plugin documentation that are not provided: listed, and refused with the reason.
    # (Not 'dp': one letter from 'ddp', it would be the first suggestion for every misspelt 'ddp'. The class
    # DataParallelStrategy raises with the reason; strategy='dp' is an unknown name that suggests 'ddp'.)
    registry.register(
        "ddp2",
        "torchplug.strategies.removed:DDP2Strategy",
        description="Removed in Lightning 1.7 (DataParallel in a node is slower than DDP): use 'ddp'",
        probe="torchplug.strategies.removed:ddp2_probe",
    )
    for name, cls in _FAIRSCALE.items():
        registry.register(
            name,
            f"torchplug.strategies.removed:{cls}",
            description="fairscale's sharded training, not provided (it became torch FSDP): use 'fsdp'",
            probe="torchplug.strategies.removed:sharded_probe",
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
    _register_legacy_precisions(registry)


_APEX = "torchplug.precision.legacy:ApexMixedPrecision"


def _register_legacy_precisions(registry: Registry[Precision]) -> None:
    """The Apex and sharded names of the original plugin documentation: their native equivalent, or the reason."""
    registry.register(
        "apex-o1",
        _APEX,
        aliases=("apex",),
        description="NVIDIA Apex AMP O1 (deprecated by NVIDIA): runs as 16-mixed, with a note",
        amp_level="O1",
    )
    registry.register("apex-o0", _APEX, description="NVIDIA Apex AMP O0: runs as 32-true, with a note", amp_level="O0")
    registry.register(
        "apex-o2",
        _APEX,
        description="NVIDIA Apex AMP O2 (float16 weights, float32 master copies): no native equivalent",
        probe="torchplug.precision.legacy:apex_o2_probe",
        amp_level="O2",
    )
    registry.register("apex-o3", _APEX, description="NVIDIA Apex AMP O3: runs as 16-true, with a note", amp_level="O3")
    registry.register(
        "sharded-16-mixed",
        "torchplug.precision.legacy:ShardedNativeMixedPrecision",
        description="ShardedNativeMixedPrecision (fairscale): runs as 16-mixed; shard with strategy='fsdp'",
        precision="16-mixed",
    )
    registry.register(
        "fully-sharded-16-mixed",
        "torchplug.precision.legacy:FullyShardedNativeMixedPrecision",
        description="FullyShardedNativeMixedPrecision (fairscale): runs as 16-mixed under strategy='fsdp'",
        precision="16-mixed",
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


@hookimpl
def torchplug_register_loggers(registry: Registry[Logger]) -> None:
    registry.register(
        "csv",
        "torchplug.loggers.csv_logs:CSVLogger",
        description="metrics.csv and hparams.yaml under <default_root_dir>/torchplug_logs/version_<n>",
    )
    registry.register(
        "tensorboard",
        "torchplug.loggers.tensorboard:TensorBoardLogger",
        aliases=("tb",),
        description="TensorBoard event files under <default_root_dir>/torchplug_logs/version_<n> (needs tensorboard)",
        probe="torchplug.loggers._availability:tensorboard_probe",
    )
