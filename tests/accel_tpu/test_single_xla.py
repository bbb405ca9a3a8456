"""``single_xla``: training a tiny model through the Trainer on one (fake) XLA device, in this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

import torchplug
from tests.accel_tpu.models import Regressor, loader, quiet
from torchplug_tpu import SingleXLAStrategy, XLAPrecision
from torchplug_xla_io import XLACheckpointIO

pytestmark = pytest.mark.usefixtures("fake_xla")


def test_one_device_trains_in_this_process_through_the_xla_plugins(tmp_path: Path, fake_state: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", devices=1, **quiet(tmp_path, max_epochs=2))
    assert isinstance(trainer.strategy, SingleXLAStrategy) and trainer.strategy.launcher is None
    model = Regressor()
    before = model.layer.weight.detach().clone()
    trainer.fit(model, loader())
    assert trainer.global_step == 16
    assert not torch.equal(model.layer.weight, before)
    assert float(trainer.callback_metrics["train_loss"]) < 5.0
    assert fake_state.calls.count("MpDeviceLoader") == 1  # the training loader went through MpDeviceLoader
    assert fake_state.syncs >= 16  # the graph was cut at least once per optimizer step
    assert "spawn:1:fork" not in fake_state.calls  # no launcher: it runs right here
    assert trainer.train_dataloader.sampler is not None  # the wrapper keeps what the Trainer reads
    assert len(trainer.train_dataloader) == 8


def test_the_sampler_epoch_reaches_the_wrapped_loader(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, RandomSampler

    epochs: list[int] = []

    class Sampler(RandomSampler):
        def set_epoch(self, epoch: int) -> None:
            epochs.append(epoch)

    data = loader().dataset
    trainer = torchplug.Trainer(accelerator="tpu", **quiet(tmp_path, max_epochs=3))
    trainer.fit(Regressor(), DataLoader(data, batch_size=16, sampler=Sampler(data)))
    assert epochs == [0, 1, 2]


def test_devices_index_selects_that_xla_device(
    tmp_path: Path, fake_xla: ModuleType, fake_chips: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_chips(4)
    asked: list[int | None] = []
    real_device = fake_xla.device

    def device(index: int | None = None) -> torch.device:
        asked.append(index)
        return real_device(index)

    monkeypatch.setattr(fake_xla, "device", device)
    trainer = torchplug.Trainer(accelerator="tpu", devices=[2], **quiet(tmp_path, max_steps=1))
    assert isinstance(trainer.strategy, SingleXLAStrategy)
    trainer.fit(Regressor(), loader())
    assert set(asked) == {2}


def test_bf16_true_trains_in_bfloat16(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", precision="bf16-true", **quiet(tmp_path, max_steps=3))
    model = Regressor()
    trainer.fit(model, loader())
    assert model.layer.weight.dtype == torch.bfloat16
    assert {dtype for dtype, _ in model.seen} == {torch.bfloat16}


def test_bf16_mixed_trains_with_float32_weights_and_bfloat16_compute(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", precision="bf16-mixed", **quiet(tmp_path, max_steps=3))
    model = Regressor()
    trainer.fit(model, loader())
    assert model.layer.weight.dtype == torch.float32
    assert {dtype for dtype, _ in model.seen} == {torch.bfloat16}


def test_checkpoints_go_through_the_xla_io_and_resume(tmp_path: Path, fake_state: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", **quiet(tmp_path, max_epochs=1, enable_checkpointing=True))
    trainer.fit(Regressor(), loader())
    assert isinstance(trainer.checkpoint_io, XLACheckpointIO)
    path = trainer.checkpoint_callback.best_model_path
    assert "_maybe_convert_to_cpu" in fake_state.calls
    checkpoint = torch.load(path, weights_only=True)  # plain CPU tensors: loads anywhere, without torch_xla
    assert checkpoint["global_step"] == 8 and checkpoint["rng"]["accelerator"] == fake_state.rng_seed
    resumed = torchplug.Trainer(accelerator="tpu", **quiet(tmp_path, max_epochs=2))
    model = Regressor()
    resumed.fit(model, loader(), ckpt_path=path)
    assert resumed.global_step == 16


def test_validate_test_and_predict_run_on_the_device(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", **quiet(tmp_path))
    model = Regressor()
    [metrics] = trainer.validate(model, loader(16))
    assert set(metrics) == {"val_loss"}
    predictions = trainer.predict(model, loader(16))
    assert torch.cat(predictions).shape == (16, 1)


def test_a_core_precision_instance_works_too(tmp_path: Path) -> None:
    from torchplug.precision import HalfPrecision

    trainer = torchplug.Trainer(accelerator="tpu", plugins=[HalfPrecision("bf16-true")], **quiet(tmp_path, max_steps=2))
    model = Regressor()
    trainer.fit(model, loader())
    assert model.layer.weight.dtype == torch.bfloat16


def test_strategy_instance_with_a_device_index(tmp_path: Path, fake_chips: Callable[[int], None]) -> None:
    fake_chips(2)
    strategy = SingleXLAStrategy(device="1", precision=XLAPrecision("bf16-true"))
    assert repr(strategy) == "SingleXLAStrategy(device=xla:1)"
    trainer = torchplug.Trainer(accelerator="tpu", strategy=strategy, devices=1, **quiet(tmp_path, max_steps=1))
    assert trainer.strategy is strategy and trainer.precision_plugin.precision == "bf16-true"
    assert strategy.precision_for("bf16-true") == "xla-bf16-true" and strategy.precision_for("other") == "other"
