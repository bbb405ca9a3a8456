"""The Trainer arguments, Trainer properties and Module methods of Lightning 2.6 that torchplug provides.

Each test shows one of them at work, as a user would write it after changing the imports.
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import torchplug
from tests.core.trainer.models import BlobData, Classifier, blobs, quiet, weights
from torchplug import MisconfigurationError
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.callbacks.model_checkpoint import ModelCheckpoint
from torchplug.callbacks.model_summary import ModelSummary
from torchplug.callbacks.timer import Timer, parse_duration
from torchplug.callbacks.tqdm_progress import TQDMProgressBar
from torchplug.profilers import AdvancedProfiler, SimpleProfiler
from torchplug.utilities.combined_loader import CombinedLoader
from torchplug.utilities.warn import reset_warned

#: Lightning 2.6's ``Trainer.__init__`` arguments (read from lightning 2.6.6).
LIGHTNING_TRAINER_ARGUMENTS = (
    "accelerator",
    "strategy",
    "devices",
    "num_nodes",
    "precision",
    "logger",
    "callbacks",
    "fast_dev_run",
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "max_time",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
    "val_check_interval",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "log_every_n_steps",
    "enable_checkpointing",
    "enable_progress_bar",
    "enable_model_summary",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
    "benchmark",
    "inference_mode",
    "use_distributed_sampler",
    "profiler",
    "detect_anomaly",
    "barebones",
    "plugins",
    "sync_batchnorm",
    "reload_dataloaders_every_n_epochs",
    "default_root_dir",
    "enable_autolog_hparams",
    "model_registry",
)


def test_every_lightning_trainer_argument_is_accepted():
    assert set(LIGHTNING_TRAINER_ARGUMENTS) <= set(inspect.signature(torchplug.Trainer.__init__).parameters)


def fit(model: Any = None, data: Any = None, ckpt_path: str | None = None, **kwargs: Any) -> torchplug.Trainer:
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(**{"max_epochs": 1, **kwargs}))
    model = model if model is not None else Classifier()
    trainer.fit(model, datamodule=data if data is not None else BlobData(), ckpt_path=ckpt_path)
    return trainer


# -- enable_model_summary -------------------------------------------------------------------------


def test_the_model_summary_is_printed_at_fit_start_with_the_example_input_shapes(capsys):
    model = Classifier()
    model.example_input_array = torch.randn(3, 16)

    trainer = fit(model, enable_model_summary=True)

    out = capsys.readouterr().out
    assert "| Name | Type       | Params | Mode  | FLOPs | In sizes | Out sizes" in out
    assert "0 | net  | Sequential | 676    | train |" in out and "[3, 16]  | [3, 4]" in out
    assert "676       Trainable params" in out and "Total estimated model params size (MB)" in out
    assert isinstance(trainer.callbacks[0], ModelSummary)


def test_the_summary_lists_deeper_layers_with_max_depth_and_is_off_with_false(capsys):
    fit(callbacks=[ModelSummary(max_depth=-1)], enable_model_summary=None)
    assert "net.3 | Linear" in capsys.readouterr().out
    trainer = fit(enable_model_summary=False)
    assert "Trainable params" not in capsys.readouterr().out
    assert not any(isinstance(c, ModelSummary) for c in trainer.callbacks)


# -- max_time -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("00:01:30:05", 5405), ({"minutes": 2}, 120), (timedelta(seconds=9), 9)],
    ids=["DD:HH:MM:SS", "dict", "timedelta"],
)
def test_max_time_takes_a_string_a_dict_or_a_timedelta(value, seconds):
    assert parse_duration(value).total_seconds() == seconds
    assert Timer(value).duration == seconds


@pytest.mark.parametrize(
    "value", ["1:30", "00:00:xx:00", {"fortnights": 1}, 12], ids=["short", "letters", "key", "int"]
)
def test_a_bad_max_time_is_refused_naming_it(value):
    with pytest.raises(MisconfigurationError, match="max_time="):
        torchplug.Trainer(**quiet(max_time=value))


def test_training_stops_when_max_time_is_spent():
    trainer = fit(max_epochs=10, max_time="00:00:00:00")
    assert trainer.global_step == 0  # checked before the first step too, as Lightning 2.6 does: no budget, no step
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    assert timer.time_remaining() <= 0


# -- overfit_batches ------------------------------------------------------------------------------


class Recorder(Classifier):
    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.seen: list[tuple[int, float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, float(batch[0].sum())))
        return super().training_step(batch, batch_idx)


def test_overfit_batches_trains_on_the_same_unshuffled_batches_every_epoch():
    model = Recorder()
    with pytest.warns(UserWarning, match="shuffling is turned off"):
        trainer = fit(model, max_epochs=3, overfit_batches=2)

    epochs = [[s for e, s in model.seen if e == epoch] for epoch in range(3)]
    assert len(epochs[0]) == 2 and epochs[0] == epochs[1] == epochs[2]
    assert trainer.num_val_batches == [2]


@pytest.mark.parametrize(
    "sampler",
    [
        pytest.param(lambda data: torch.utils.data.RandomSampler(data), id="shuffle"),
        pytest.param(lambda data: torch.utils.data.WeightedRandomSampler([1.0] * len(data), len(data)), id="weighted"),
    ],
)
def test_overfit_batches_reads_in_order_in_every_process(sampler):
    """The DistributedSampler of each process used to shuffle; a custom sampler was kept, drawing other batches."""
    data = blobs(64)
    trainer = torchplug.Trainer(**quiet(accelerator="cpu", strategy="ddp", devices=2, overfit_batches=2))
    with pytest.warns(UserWarning, match="overfit_batches is set, so the train_dataloaders are read in order"):
        loader = trainer._data._train_loader(DataLoader(data, batch_size=8, sampler=sampler(data)))
    assert isinstance(loader.sampler, torch.utils.data.DistributedSampler) and not loader.sampler.shuffle
    assert [int(i) for i in loader.sampler][:4] == [0, 2, 4, 6]  # rank 0's shard, in order


# -- benchmark ------------------------------------------------------------------------------------


class TunableCPU(CPUAccelerator):
    """A CPU accelerator that says it has kernel tuning, recording what it was asked."""

    asked: list[bool] = []

    def set_benchmark(self, enabled: bool) -> bool:
        TunableCPU.asked.append(enabled)
        return True


def test_benchmark_is_asked_of_the_accelerator():
    TunableCPU.asked = []
    fit(accelerator=TunableCPU(), benchmark=True)
    fit(accelerator=TunableCPU(), deterministic=True)  # None with deterministic: off
    fit(accelerator=TunableCPU())  # None: left alone
    assert TunableCPU.asked == [True, False]


def test_benchmark_says_so_when_the_accelerator_has_no_tuning():
    with pytest.warns(UserWarning, match="benchmark=True has no effect on CPUAccelerator"):
        fit(benchmark=True)


# -- detect_anomaly -------------------------------------------------------------------------------


class NaNGradient(Classifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.sqrt(self(batch[0]).sum() * 0 - 1)  # the backward of sqrt(-1) is NaN


def test_detect_anomaly_names_the_operation_that_made_a_nan():
    with pytest.raises(RuntimeError, match="SqrtBackward0"):
        fit(NaNGradient(), detect_anomaly=True)
    with pytest.raises(torchplug.NonFiniteLossError, match="The training loss is nan"):
        fit(NaNGradient())  # without it, the loss itself is checked (nonfinite_loss="raise", the default)
    fit(NaNGradient(), nonfinite_loss="ignore")  # and without that either, the NaN goes unnoticed (as in torch)


# -- profiler -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["simple", "advanced", "pytorch"])
def test_a_profiler_reports_the_training_batches_at_the_end(name, torchplug_log, tmp_path):
    trainer = fit(profiler=name, default_root_dir=tmp_path)
    out = torchplug_log.text
    assert f"{type(trainer.profiler).__name__} report (fit):" in out
    assert "run_training_batch" in out or "run_training_epoch" in out


def test_a_profiler_instance_writes_its_report_to_a_file(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="perf")
    fit(profiler=profiler)
    report = (tmp_path / "fit-perf.txt").read_text()
    assert "[Module]Classifier.configure_optimizers" not in report  # hooks only: not every method
    assert ("run_training_batch" in report and "[Callback]" not in report) or "run_training_epoch" in report


def test_the_advanced_profiler_shows_where_the_time_went(torchplug_log):
    fit(profiler=AdvancedProfiler(line_count_restriction=5))
    assert "Profile stats for: run_training_batch" in torchplug_log.text  # logged, as Lightning logs it


def test_the_advanced_profiler_dumps_each_actions_raw_statistics(tmp_path):
    import pstats

    fit(profiler=AdvancedProfiler(dirpath=tmp_path, filename="perf", dump_stats=True))
    path = tmp_path / "fit-perf-run_training_batch.prof"
    stats = pstats.Stats(str(path))
    assert stats.total_calls > 0  # type: ignore[attr-defined]


def test_the_pytorch_profiler_writes_a_chrome_trace_and_groups_by_input_shapes(tmp_path, torchplug_log):
    import json

    from torchplug.profilers import PyTorchProfiler

    profiler = PyTorchProfiler(group_by_input_shapes=True, row_limit=5)
    fit(profiler=profiler, default_root_dir=tmp_path)
    assert profiler.trace_path == f"{tmp_path}/fit-pytorch.pt.trace.json"
    events = json.loads((tmp_path / "fit-pytorch.pt.trace.json").read_text())["traceEvents"]
    assert any(event.get("name") == "run_training_batch" for event in events)
    assert "Input Shapes" in torchplug_log.text  # the report is logged, as Lightning logs it


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"emit_nvtx": True}, r"emit_nvtx=True\) is not supported"),
        ({"record_module_names": True}, r"record_module_names=True\) is not supported"),
        ({"export_to_chrome": "yes"}, r"export_to_chrome='yes'\): give True or False"),
        ({"record_shape": True}, r"torch.profiler.profile takes no record_shape\. It takes: .*record_shapes"),
        ({"group_by_input_shapes": True, "record_shapes": False}, r"needs them recorded"),
    ],
)
def test_the_pytorch_profiler_refuses_what_it_would_not_honour(kwargs, match):
    from torchplug.profilers import PyTorchProfiler

    with pytest.raises(ValueError, match=match):
        PyTorchProfiler(**kwargs)


def test_an_unknown_profiler_is_refused():
    with pytest.raises(MisconfigurationError, match="profiler='fast'"):
        torchplug.Trainer(**quiet(profiler="fast"))


# -- reload_dataloaders_every_n_epochs ------------------------------------------------------------


class CountingData(BlobData):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def train_dataloader(self) -> DataLoader[Any]:
        self.requests += 1
        return super().train_dataloader()


@pytest.mark.parametrize(("every", "requests"), [(0, 1), (1, 4), (2, 2)])
def test_dataloaders_are_requested_again_every_n_epochs(every, requests):
    data = CountingData()
    fit(data=data, max_epochs=4, reload_dataloaders_every_n_epochs=every, limit_train_batches=2)
    assert data.requests == requests


def test_reload_dataloaders_every_n_epochs_says_that_loaders_passed_to_fit_cannot_be_reloaded():
    """They are the same objects every epoch: the setting did nothing, without a word."""
    trainer = torchplug.Trainer(**quiet(max_epochs=2, reload_dataloaders_every_n_epochs=1, limit_val_batches=0))
    with pytest.warns(UserWarning, match="reload_dataloaders_every_n_epochs=1 cannot reload train_dataloaders:"):
        trainer.fit(Classifier(), _loader(64))


# -- barebones ------------------------------------------------------------------------------------


def test_barebones_turns_off_everything_that_costs_speed():
    trainer = torchplug.Trainer(accelerator="cpu", barebones=True, max_steps=2)
    assert trainer.loggers == [] and trainer.callbacks == [] and trainer.num_sanity_val_steps == 0


class Logs(Classifier):
    pass


def test_barebones_refuses_self_log_and_the_features_it_turns_off():
    with pytest.raises(MisconfigurationError, match="barebones mode logs nothing"):
        torchplug.Trainer(accelerator="cpu", barebones=True, max_steps=2).fit(Classifier(), datamodule=BlobData())
    with pytest.raises(MisconfigurationError, match=r"barebones=True, enable_checkpointing=True"):
        torchplug.Trainer(barebones=True, enable_checkpointing=True)


@pytest.mark.parametrize("callback", [ModelCheckpoint, TQDMProgressBar, ModelSummary])
def test_barebones_refuses_a_callback_of_a_feature_it_turns_off_naming_barebones(callback):
    with pytest.raises(
        MisconfigurationError, match=rf"Trainer\(barebones=True\) turns off what {callback.__name__} does"
    ):
        torchplug.Trainer(barebones=True, callbacks=[callback()])


def test_a_model_summary_callback_is_kept_with_enable_model_summary_false_and_said(capsys):
    with pytest.warns(UserWarning, match=r"enable_model_summary=False turns off only the default summary: the Model"):
        trainer = torchplug.Trainer(
            **quiet(enable_model_summary=False, callbacks=[ModelSummary(max_depth=2)], max_epochs=1)
        )
    trainer.fit(Classifier(), datamodule=BlobData())
    assert "Trainable params" in capsys.readouterr().out  # printed, as Lightning prints it


# -- the rest of the arguments --------------------------------------------------------------------


def test_sync_batchnorm_converts_the_batchnorm_layers():
    model = Classifier()
    model.net.insert(1, torch.nn.BatchNorm1d(32))
    fit(model, sync_batchnorm=True)
    assert isinstance(model.net[1], torch.nn.SyncBatchNorm)


def test_sync_batchnorm_with_one_process_says_it_has_nothing_to_synchronise():
    model = Classifier()
    model.net.insert(1, torch.nn.BatchNorm1d(32))
    reset_warned()
    with pytest.warns(UserWarning, match=r"sync_batchnorm=True with one process \(world size 1\): there is no other"):
        fit(model, sync_batchnorm=True)


def test_sync_batchnorm_on_a_model_without_batchnorm_says_there_is_nothing_to_convert():
    reset_warned()
    with pytest.warns(UserWarning, match=r"sync_batchnorm=True, but Classifier has no BatchNorm layer"):
        fit(Classifier(), sync_batchnorm=True)


def test_init_module_builds_tensors_in_the_precision_dtype():
    trainer = torchplug.Trainer(**quiet(precision="64-true"))
    with trainer.init_module():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.dtype == torch.float64
    with pytest.raises(MisconfigurationError, match="empty_init=True"), trainer.init_module(empty_init=True):
        pass


def test_model_registry_is_refused():
    with pytest.raises(MisconfigurationError, match="model_registry="):
        torchplug.Trainer(model_registry="my-model")


class OneCycle(Classifier):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        steps = self.trainer.estimated_stepping_batches
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.1, total_steps=steps), "interval": "step"}}  # fmt: skip


def test_estimated_stepping_batches_sizes_a_one_cycle_schedule():
    trainer = fit(OneCycle(), max_epochs=3, accumulate_grad_batches=3)  # 16 batches an epoch: 6 steps
    assert trainer.estimated_stepping_batches == 18 == trainer.global_step


def test_trainer_properties_of_lightning(tmp_path):
    stopping = torchplug.callbacks.EarlyStopping("val_loss")
    checkpoints = [torchplug.callbacks.ModelCheckpoint(monitor="val_loss"), torchplug.callbacks.ModelCheckpoint()]
    trainer = fit(
        callbacks=[stopping, *checkpoints], enable_checkpointing=None, num_sanity_val_steps=2, default_root_dir=tmp_path
    )
    assert trainer.checkpoint_callbacks == checkpoints and trainer.checkpoint_callback is checkpoints[0]
    assert trainer.early_stopping_callbacks == [stopping] and trainer.early_stopping_callback is stopping
    assert trainer.precision == "32-true" and trainer.scaler is None and not trainer.interrupted
    assert trainer.enable_validation and trainer.num_sanity_val_batches == [2]


# -- Module ---------------------------------------------------------------------------------------


def test_freeze_and_unfreeze():
    model = Classifier()
    model.freeze()
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    model.unfreeze()
    assert all(p.requires_grad for p in model.parameters()) and model.training


def test_hparams_initial_keeps_the_saved_values():
    model = Classifier(lr=0.5)
    model.hparams.lr = 0.1
    assert model.hparams_initial.lr == 0.5 and model.hparams.lr == 0.1


@pytest.mark.parametrize("method", ["script", "trace"])
def test_to_torchscript_compiles_the_module_and_saves_it(method, tmp_path):
    model = Classifier()
    model.example_input_array = torch.randn(5, 16)
    scripted = model.to_torchscript(tmp_path / "model.pt", method=method)
    loaded = torch.jit.load(tmp_path / "model.pt")
    model.eval()
    torch.testing.assert_close(loaded(model.example_input_array), model(model.example_input_array))
    assert scripted is not None


def test_to_onnx_exports_a_model_that_computes_the_same(tmp_path):
    onnx = pytest.importorskip("onnx", reason="core[onnx] installs onnx and onnxscript")
    from onnx.reference import ReferenceEvaluator

    model = Classifier()
    model.example_input_array = torch.randn(5, 16)
    model.to_onnx(tmp_path / "model.onnx")

    graph = onnx.load(tmp_path / "model.onnx")
    onnx.checker.check_model(graph)
    (out,) = ReferenceEvaluator(graph).run(None, {graph.graph.input[0].name: model.example_input_array.numpy()})
    model.eval()
    torch.testing.assert_close(torch.from_numpy(out), model(model.example_input_array).detach())
    assert model.training is False  # eval() above; to_onnx itself restores the mode it found


def test_exports_need_an_example_input():
    with pytest.raises(ValueError, match="example_input_array"):
        Classifier().to_torchscript(method="trace")


class GAN(torchplug.Module):
    """Two optimizers stepped by hand, each toggled so the other's parameters get no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.a, self.b = torch.nn.Linear(16, 1), torch.nn.Linear(16, 1)
        self.grads_while_a: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_a, opt_b = self.optimizers()
        x = batch[0]
        with self.toggled_optimizer(opt_a):
            loss = (self.a(x) + self.b(x)).pow(2).mean()
            self.manual_backward(loss)
            self.grads_while_a.append(self.b.weight.grad is not None)
            self.clip_gradients(opt_a, gradient_clip_val=0.01)
            assert self.a.weight.grad.norm() <= 0.01 + 1e-6
            opt_a.step()
            opt_a.zero_grad()
        self.toggle_optimizer(opt_b)
        self.manual_backward(self.b(x).pow(2).mean())
        opt_b.step()
        opt_b.zero_grad()
        self.untoggle_optimizer(opt_b)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)


def test_toggle_optimizer_freezes_the_other_optimizers_parameters():
    model = GAN()
    fit(model, limit_train_batches=3)
    assert model.grads_while_a == [False, False, False]
    assert all(p.requires_grad for p in model.parameters())


# -- data -----------------------------------------------------------------------------------------


class TwoSources(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches.append(batch)
        if isinstance(batch, dict):
            parts = [b for b in batch.values() if b is not None]
        else:
            parts = batch if isinstance(batch[0], (list, tuple)) else [batch]  # a list of batches, or one batch
        return sum(super(TwoSources, self).training_step(b, batch_idx) for b in parts)


def _loader(n: int) -> DataLoader[Any]:
    return DataLoader(blobs(n), batch_size=32)


@pytest.mark.parametrize(
    ("mode", "batches"), [("max_size_cycle", 4), ("max_size", 4), ("min_size", 2), ("sequential", 6)]
)
def test_several_training_loaders_are_combined(mode, batches):
    from torchplug.utilities.combined_loader import CombinedLoader

    model = TwoSources()
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    trainer.fit(model, train_dataloaders=CombinedLoader({"a": _loader(64), "b": _loader(128)}, mode))
    assert len(model.batches) == batches == trainer.num_training_batches
    if mode != "sequential":
        assert set(model.batches[0]) == {"a", "b"}
    if mode == "max_size":
        assert model.batches[-1]["a"] is None


def test_a_dict_or_list_of_training_loaders_cycles_the_shorter_ones():
    model = TwoSources()
    torchplug.Trainer(**quiet(max_epochs=1)).fit(model, train_dataloaders=[_loader(64), _loader(128)])
    assert len(model.batches) == 4 and isinstance(model.batches[0], list)


class PerLoader(Classifier):
    """Counts the evaluation batches of each dataloader_idx."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, int] = {}

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen[dataloader_idx] = self.seen.get(dataloader_idx, 0) + 1
        self._evaluate(batch, "val")


@pytest.mark.parametrize(
    "loaders",
    [
        pytest.param(lambda: {"small": _loader(64), "large": _loader(128)}, id="dict"),
        pytest.param(
            lambda: CombinedLoader({"small": _loader(64), "large": _loader(128)}, "sequential"),
            id="sequential-combined-loader",
        ),
    ],
)
def test_a_dict_of_evaluation_loaders_evaluates_each_loader_in_turn(loaders):
    """As in Lightning: the dict's loaders in order, told apart by dataloader_idx (their keys were iterated before)."""
    model = PerLoader()
    results = torchplug.Trainer(**quiet()).validate(model, loaders(), verbose=False)
    assert model.seen == {0: 2, 1: 4}
    assert len(results) == 2 and "val_loss/dataloader_idx_1" in results[1]


def test_a_combined_loader_that_zips_batches_cannot_be_evaluated():
    with pytest.raises(MisconfigurationError) as info:
        torchplug.Trainer(**quiet()).validate(PerLoader(), CombinedLoader([_loader(64), _loader(64)], "min_size"))
    assert "dataloaders=CombinedLoader(mode='min_size') is not valid" in str(info.value)
    assert "Hint: pass CombinedLoader(..., mode='sequential')" in str(info.value)


def _shards(loader: DataLoader[Any], unrepeated: bool = False) -> list[list[int]]:
    """The sample indices each of 2 processes reads from ``loader`` once use_distributed_sampler rebuilt it."""
    from torchplug.trainer.data import with_distributed_sampler

    shards = []
    for rank in (0, 1):
        torch.manual_seed(7)  # every process seeds alike (seed_everything): a random sampler draws the same
        rebuilt = with_distributed_sampler(loader, {"num_replicas": 2, "rank": rank}, True, unrepeated)
        shards.append([int(i) for batch in rebuilt for i in batch[0].reshape(-1)])
    return shards


class _Indices(torch.utils.data.Dataset[Any]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> Any:
        return torch.tensor(index), torch.tensor(0)


def _weighted() -> DataLoader[Any]:
    return DataLoader(_Indices(), batch_size=2, sampler=torch.utils.data.WeightedRandomSampler([1.0] * 10, 10))


def _batch_sampler() -> DataLoader[Any]:
    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(_Indices()), 2, drop_last=False)
    return DataLoader(_Indices(), batch_sampler=batches)


class _FirstSeven(torch.utils.data.Sampler[int]):
    """A sampler of the user's own: the first 7 indices."""

    def __iter__(self) -> Any:
        return iter(range(7))

    def __len__(self) -> int:
        return 7


@pytest.mark.parametrize(
    "loader",
    [
        pytest.param(_weighted, id="custom-sampler"),
        pytest.param(_batch_sampler, id="batch-sampler"),
        pytest.param(lambda: DataLoader(_Indices(), batch_size=None), id="no-automatic-batching"),
    ],
)
def test_use_distributed_sampler_shards_loaders_with_other_samplers(loader):
    """As in Lightning: each process reads its own share (they read everything before, each of them)."""
    shards = _shards(loader())
    torch.manual_seed(7)
    everything = [int(i) for batch in loader() for i in batch[0].reshape(-1)]
    assert [len(shard) for shard in shards] == [5, 5]
    assert sorted(shards[0] + shards[1]) == sorted(everything)


def test_a_custom_sampler_is_shared_out_without_repeats_for_predict():
    loader = DataLoader(_Indices(), batch_size=2, sampler=_FirstSeven())
    assert _shards(loader, unrepeated=True) == [[0, 2, 4, 6], [1, 3, 5]]


def test_a_batch_sampler_that_cannot_take_another_sampler_is_refused_under_use_distributed_sampler():
    class Buckets:
        def __iter__(self):
            return iter([[0, 1], [2, 3]])

        def __len__(self):
            return 2

    with pytest.raises(MisconfigurationError) as info:
        _shards(DataLoader(_Indices(), batch_sampler=Buckets()))
    assert "use_distributed_sampler=True cannot shard the batches of DataLoader(batch_sampler=Buckets(...))" in str(
        info.value
    )
    assert "Hint: make Buckets a torch BatchSampler that takes (sampler, batch_size, drop_last), or pass " in str(
        info.value
    )


def test_datamodule_from_datasets():
    data = torchplug.DataModule.from_datasets(blobs(64), val_dataset=blobs(32), batch_size=16)
    trainer = fit(data=data)
    assert trainer.num_training_batches == 4 and trainer.num_val_batches == [2]


class StatefulData(BlobData):
    def __init__(self) -> None:
        super().__init__()
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.position = state_dict["position"]


def test_datamodule_state_is_saved_and_restored(tmp_path):
    data = StatefulData()
    data.position = 17
    trainer = fit(data=data)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    resumed = StatefulData()
    fit(data=resumed, max_epochs=2, ckpt_path=str(tmp_path / "run.ckpt"))
    assert resumed.position == 17


# -- torch.compile --------------------------------------------------------------------------------


def test_fit_takes_a_compiled_module_and_keeps_its_compiled_forward():
    graphs: list[Any] = []

    def backend(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(graph)
        return graph.forward

    model = Classifier()
    compiled = torch.compile(model, backend=backend)
    before = weights(model)
    trainer = fit(compiled, limit_train_batches=2)
    assert trainer.module is model and graphs  # the forward ran compiled
    assert any(not torch.equal(before[k], v) for k, v in weights(model).items())


def test_torchplug_never_imports_torch_dynamo_itself(tmp_path):
    # torch imports it when an optimizer is built (torch.optim's own decorators): a run without one shows ours.
    script = (
        "import sys, torch, torchplug\n"
        "from tests.core.trainer.models import BlobData, Classifier, quiet\n"
        "torchplug.Trainer(**quiet(enable_model_summary=True)).validate(Classifier(), datamodule=BlobData())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    root = Path(__file__).parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


# -- checkpoints that are not ---------------------------------------------------------------------


def test_a_file_that_is_no_checkpoint_is_refused_naming_the_path_and_the_missing_keys(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"net.0.weight": torch.zeros(1)}, path)
    with pytest.raises(MisconfigurationError, match=r"weights.pt' is not a torchplug or Lightning checkpoint: it lacks "
                                                    r"the key\(s\) 'state_dict'"):  # fmt: skip
        fit(ckpt_path=str(path))
    with pytest.raises(MisconfigurationError, match="lacks the key"):
        Classifier.load_from_checkpoint(path)


def test_a_weights_only_checkpoint_cannot_resume_fit(tmp_path):
    trainer = fit()
    trainer.save_checkpoint(tmp_path / "w.ckpt", weights_only=True)
    with pytest.raises(MisconfigurationError, match="holds only weights"):
        fit(max_epochs=2, ckpt_path=str(tmp_path / "w.ckpt"))
    assert math.isfinite(float(Classifier.load_from_checkpoint(tmp_path / "w.ckpt").net[0].weight.sum()))


def test_test_without_a_model_after_fit_loads_the_best_checkpoint_and_says_so(tmp_path):
    """As in Lightning; it used the last weights in memory without a word."""
    from torchplug.callbacks import ModelCheckpoint

    best_is_the_first = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc", mode="min", save_top_k=1)
    trainer = fit(max_epochs=3, callbacks=[best_is_the_first], enable_checkpointing=True)
    best = best_is_the_first.best_model_path
    assert best.endswith("epoch=0-step=16.ckpt")
    with pytest.warns(UserWarning, match=r"trainer\.test\(\) was called without a model or ckpt_path: the best"):
        trainer.test(datamodule=BlobData(), verbose=False)
    saved = torch.load(best, weights_only=True)["state_dict"]
    assert all(torch.equal(value, saved[name]) for name, value in weights(trainer.lightning_module).items())


def test_validate_without_a_model_or_a_best_checkpoint_uses_the_weights_in_memory_and_says_so():
    trainer = fit(max_epochs=1)
    before = weights(trainer.lightning_module)
    with pytest.warns(UserWarning, match="no ModelCheckpoint saved a best checkpoint: the weights in memory") as record:
        trainer.validate(datamodule=BlobData(), verbose=False)
    assert "Hint: pass ckpt_path='best', 'last' or a path to choose" in str(record[0].message)
    assert all(torch.equal(value, before[name]) for name, value in weights(trainer.lightning_module).items())


@pytest.mark.parametrize(("given", "kept"), [(None, True), (True, True), (False, False)])
def test_predict_return_predictions_none_returns_them_as_in_lightning(given, kept):
    """None is Lightning's default (return them); it returned nothing."""
    loader = DataLoader(blobs(8).tensors[0], batch_size=4)
    predictions = torchplug.Trainer(**quiet()).predict(Classifier(), loader, return_predictions=given)
    assert (predictions is not None and len(predictions) == 2) is kept


def test_predict_return_predictions_that_is_not_a_bool_is_refused():
    loader = DataLoader(blobs(8).tensors[0], batch_size=4)
    with pytest.raises(MisconfigurationError, match="return_predictions='no': choose True, False"):
        torchplug.Trainer(**quiet()).predict(Classifier(), loader, return_predictions="no")


def test_save_hyperparameters_warns_about_an_ignore_name_that_is_no_argument():
    class Net(torchplug.Module):
        def __init__(self, lr: float = 0.1, secret: str = "hunter2") -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["secrett"])

    with pytest.warns(
        UserWarning, match=r"'secrett' is not an argument of Net.__init__.*Did you mean 'secret'\?"
    ) as caught:
        net = Net()
    assert caught[0].filename == __file__  # pointed at the __init__ that called it
    assert dict(net.hparams) == {"lr": 0.1, "secret": "hunter2"}  # what the typo let through, now said


def test_save_hyperparameters_with_kwargs_may_ignore_a_keyword_not_given():
    class Net(torchplug.Module):
        def __init__(self, lr: float = 0.1, **kwargs: Any) -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["backbone"])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dict(Net(depth=3).hparams) == {"lr": 0.1, "depth": 3}
