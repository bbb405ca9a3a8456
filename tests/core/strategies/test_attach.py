"""Strategy.attach: the one way to assemble a strategy, with or without a Trainer."""

from __future__ import annotations

import pytest
import torch
from typing_extensions import override

import torchplug
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.environments.local import LocalEnvironment
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.precision.amp import MixedPrecision
from torchplug.strategies.ddp import DDPStrategy
from torchplug.strategies.launchers.multiprocessing import MultiProcessingLauncher
from torchplug.strategies.launchers.subprocess_script import SubprocessScriptLauncher
from torchplug.strategies.single_device import SingleDeviceStrategy

CPU = torch.device("cpu")


def test_attach_gives_a_single_device_strategy_everything_it_lacks() -> None:
    accelerator, io = CPUAccelerator(), TorchCheckpointIO()
    strategy = SingleDeviceStrategy()
    strategy.attach(accelerator=accelerator, checkpoint_io=io, parallel_devices=[CPU])
    assert strategy.accelerator is accelerator and strategy.checkpoint_io is io
    assert type(strategy.precision) is torchplug.Precision  # none given: full precision
    assert strategy.launcher is None and strategy.root_device == CPU
    assert strategy.num_nodes == 1


def test_a_component_given_to_the_constructor_wins() -> None:
    own_accelerator, own_io, own_precision = CPUAccelerator(), TorchCheckpointIO(), MixedPrecision("bf16-mixed")
    strategy = SingleDeviceStrategy(accelerator=own_accelerator, precision=own_precision, checkpoint_io=own_io)
    strategy.attach(accelerator=CPUAccelerator(), precision=torchplug.Precision(), checkpoint_io=TorchCheckpointIO())
    assert strategy.accelerator is own_accelerator
    assert strategy.precision is own_precision
    assert strategy.checkpoint_io is own_io


def test_devices_given_to_the_constructor_win() -> None:
    strategy = DDPStrategy(parallel_devices=[CPU, CPU, CPU])
    strategy.attach(accelerator=CPUAccelerator(), cluster_environment=LocalEnvironment(), parallel_devices=[CPU])
    assert strategy.num_processes == 3


def test_attach_connects_the_precision_to_the_accelerator() -> None:
    precision = MixedPrecision("16-mixed")
    SingleDeviceStrategy(precision=precision).attach(accelerator=CPUAccelerator())
    assert precision.device_type == CPUAccelerator.autocast_device_type
    assert isinstance(precision.scaler, torch.amp.GradScaler)


@pytest.mark.parametrize(
    ("start_method", "launcher"),
    [("popen", SubprocessScriptLauncher), ("spawn", MultiProcessingLauncher)],
    ids=["popen", "spawn"],
)
def test_attach_computes_the_ranks_and_sets_the_launcher(start_method: str, launcher: type) -> None:
    environment = LocalEnvironment()
    strategy = DDPStrategy(start_method=start_method)
    strategy.attach(
        accelerator=CPUAccelerator(), cluster_environment=environment, parallel_devices=[CPU, CPU], num_nodes=1
    )
    assert isinstance(strategy.launcher, launcher)
    assert environment.world_size() == 2 and environment.global_rank() == 0
    assert strategy.world_size == 2 and strategy.is_global_zero
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}


def test_attach_needs_an_accelerator() -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=r"SingleDeviceStrategy.attach\(\) needs an accelerator"):
        SingleDeviceStrategy().attach()


def test_a_distributed_strategy_needs_a_cluster_environment() -> None:
    with pytest.raises(torchplug.MisconfigurationError, match="DDPStrategy runs several processes, so attach"):
        DDPStrategy().attach(accelerator=CPUAccelerator(), parallel_devices=[CPU, CPU])


@pytest.mark.parametrize("num_nodes", [0, True, "2"])
def test_attach_refuses_a_bad_num_nodes(num_nodes: object) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=rf"num_nodes={num_nodes!r} is not valid"):
        SingleDeviceStrategy().attach(accelerator=CPUAccelerator(), num_nodes=num_nodes)  # type: ignore[arg-type]


class _OneNodeOnly(SingleDeviceStrategy):
    """A vendor strategy that checks what it was given, as accelerator plugins' strategies do."""

    @override
    def configure_launcher(self) -> None:
        if self.num_nodes != 1:
            raise torchplug.MisconfigurationError(f"_OneNodeOnly drives one host, but num_nodes={self.num_nodes}.")


def test_configure_launcher_is_where_a_strategy_refuses_its_components() -> None:
    strategy = _OneNodeOnly()
    with pytest.raises(torchplug.MisconfigurationError, match="but num_nodes=2"):
        strategy.attach(accelerator=CPUAccelerator(), num_nodes=2)
    strategy.attach(accelerator=CPUAccelerator())
    assert strategy.num_nodes == 1


def test_the_trainer_assembles_its_strategy_through_attach(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []
    attach = torchplug.Strategy.attach

    def recording_attach(self: torchplug.Strategy, **kwargs: object) -> None:
        calls.append(kwargs)
        attach(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torchplug.Strategy, "attach", recording_attach)
    trainer = torchplug.Trainer(
        strategy="ddp_spawn", devices=2, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    assert len(calls) == 1
    assert calls[0]["accelerator"] is trainer.strategy.accelerator
    assert calls[0]["precision"] is trainer.strategy.precision
    assert calls[0]["parallel_devices"] == [CPU, CPU] and calls[0]["num_nodes"] == 1
    assert isinstance(trainer.strategy.launcher, MultiProcessingLauncher)
