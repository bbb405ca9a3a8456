"""TensorBoardLogger: event files in the CSVLogger layout, and a clear error without tensorboard."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from tests.core.loggers.conftest import LoggingModel
from torchplug._errors import MisconfigurationError
from torchplug.core.module import Module
from torchplug.loggers import TensorBoardLogger
from torchplug.trainer.trainer import Trainer

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
needs_tensorboard = pytest.mark.skipif(
    not HAS_TENSORBOARD, reason="tensorboard is not installed (pip install -c constraints.txt tensorboard)"
)


def scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``log_dir``, read back with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir)
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_missing_tensorboard_is_a_clear_import_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what Python does for a package that is not installed
    with pytest.raises(ImportError, match=r"^TensorBoardLogger needs tensorboard\. Hint: pip install tensorboard$"):
        TensorBoardLogger(tmp_path)


@needs_tensorboard
def test_missing_tensorboard_when_the_writer_is_created(tmp_path, monkeypatch):
    logger = TensorBoardLogger(tmp_path)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError, match="Hint: pip install tensorboard"):
        logger.experiment  # noqa: B018


@needs_tensorboard
def test_fit_writes_event_files_with_the_metrics(tmp_path, fit_with):
    logger = TensorBoardLogger(tmp_path, name="tb")
    fit_with(logger)

    assert logger.log_dir == f"{tmp_path}/tb/version_0"
    assert glob.glob(f"{logger.log_dir}/events.out.tfevents.*")
    values = scalars(logger.log_dir)
    assert [step for step, _ in values["train_loss_step"]] == [1, 3, 5, 7, 9, 11, 13, 15]  # Lightning's steps
    assert [step for step, _ in values["train_loss_epoch"]] == [7, 15]
    assert len(values["val_loss"]) == 2
    assert values["hp_metric"] == [(0, -1.0)]
    # Checkpoints go beside the events by default, as with CSVLogger.
    assert os.listdir(f"{logger.log_dir}/checkpoints") == ["epoch=1-step=16.ckpt"]
    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert "lr: 0.01" in stream.read()


@needs_tensorboard
def test_versions_prefix_and_sub_dir(tmp_path):
    os.makedirs(tmp_path / "exp" / "version_3")
    logger = TensorBoardLogger(tmp_path, name="exp", prefix="run", sub_dir="train", default_hp_metric=False)
    assert logger.version == 4
    logger.version = "custom"  # the Trainer sets rank 0's version on every process this way
    assert logger.log_dir == f"{tmp_path}/exp/custom/train"

    logger.log_metrics({"loss": torch.tensor(0.5), "pair": {"a": 1.0, "b": 2.0}}, step=3)
    logger.log_hyperparams({"optimizer": {"name": "sgd", "lr": 0.1}, "layers": [1, 2]})
    logger.finalize("success")

    values = scalars(logger.log_dir)
    assert values["run-loss"] == [(3, 0.5)]
    assert "hp_metric" not in values
    assert glob.glob(f"{logger.log_dir}/*pair*")  # add_scalars writes one sub-run per key


@needs_tensorboard
def test_the_scalars_of_one_call_are_one_event_read_back_as_each_scalar(tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    logger = TensorBoardLogger(tmp_path, name="exp", default_hp_metric=False)
    logger.log_metrics({"a": 1.0, "b": torch.tensor(2.5), "c": 3, "pair": {"x": 4.0}}, step=5)
    logger.log_metrics({"a": 6.0}, step=6)
    logger.finalize("success")

    values = scalars(logger.log_dir)
    assert values["a"] == [(5, 1.0), (6, 6.0)]
    assert values["b"] == [(5, 2.5)]
    assert values["c"] == [(5, 3.0)]
    (events_file,) = glob.glob(f"{logger.log_dir}/events.out.tfevents.*")
    summaries = [event.summary for event in EventFileLoader(events_file).Load() if event.HasField("summary")]
    assert [[value.tag for value in summary.value] for summary in summaries] == [["a", "b", "c"], ["a"]]


class _GraphModel(LoggingModel):
    """A LoggingModel with a ``forward`` and, unless ``example`` is None, an ``example_input_array``."""

    def __init__(self, example: torch.Tensor | None) -> None:
        super().__init__()
        self.example_input_array = example

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def _fit_for_graph(logger: TensorBoardLogger, model: LoggingModel) -> None:
    x = torch.randn(8, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    Trainer(accelerator="cpu", logger=logger, max_epochs=1, enable_progress_bar=False).fit(model, loader)


def _has_graph(log_dir: str) -> bool:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir)
    events.Reload()
    return bool(events.Tags()["graph"])


@needs_tensorboard
@pytest.mark.parametrize("log_graph", [True, False], ids=["log-graph", "default"])
def test_log_graph_adds_the_model_graph_when_fit_starts(tmp_path, log_graph):
    logger = TensorBoardLogger(tmp_path, log_graph=log_graph)
    _fit_for_graph(logger, _GraphModel(torch.randn(2, 4)))

    assert _has_graph(logger.log_dir) is log_graph


@needs_tensorboard
def test_log_graph_without_an_example_input_warns(tmp_path):
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    with pytest.warns(UserWarning, match=r"log_graph=True\) logs no graph: the input to trace it with is none.*Hint"):
        _fit_for_graph(logger, _GraphModel(None))

    assert not _has_graph(logger.log_dir)


@needs_tensorboard
@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"flush_sec": 5}, "flush_sec=5"), ({"log_dir": "elsewhere"}, "log_dir='elsewhere'")],
    ids=["typo", "log-dir"],
)
def test_writer_keywords_that_summary_writer_does_not_take_are_refused_at_once(tmp_path, kwargs, named):
    with pytest.raises(
        MisconfigurationError, match=rf"TensorBoardLogger\({named}\) is not valid: .*takes comment, .*flush_secs.*Hint"
    ):
        TensorBoardLogger(tmp_path, **kwargs)

    TensorBoardLogger(tmp_path, flush_secs=5, max_queue=3)  # SummaryWriter's own keywords: accepted


@needs_tensorboard
def test_sibling_log_dirs_are_the_other_numbered_versions(tmp_path):
    for name in ("version_0", "version_2", "other", "version_x"):
        os.makedirs(tmp_path / "exp" / name)
    (tmp_path / "exp" / "version_9").write_text("a file, not a version")
    logger = TensorBoardLogger(tmp_path, name="exp", sub_dir="train")
    assert logger.version == 3
    assert sorted(logger.sibling_log_dirs()) == [f"{tmp_path}/exp/version_0/train", f"{tmp_path}/exp/version_2/train"]


def test_the_availability_flag_lightning_code_asks_says_whether_tensorboard_is_installed():
    from torchplug.loggers.tensorboard import _TENSORBOARD_AVAILABLE

    assert _TENSORBOARD_AVAILABLE is HAS_TENSORBOARD


class _NoHyperparameters(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@needs_tensorboard
@pytest.mark.parametrize(("model", "written"), [(_NoHyperparameters, {}), (LoggingModel, {"lr": 0.05, "hidden": 4,
                         "name": "tiny"})], ids=["no hyperparameters", "saved hyperparameters"])  # fmt: skip
def test_a_one_step_run_leaves_its_version_directory_with_hparams_yaml(tmp_path, model, written):
    x = torch.randn(4, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = Trainer(accelerator="cpu", logger=logger, max_steps=1, enable_progress_bar=False, limit_val_batches=0)
    trainer.fit(model(), loader)  # nothing reaches the loggers in 1 step with log_every_n_steps=50

    assert os.path.isdir(f"{tmp_path}/tb/version_0")
    with open(f"{tmp_path}/tb/version_0/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == written


@needs_tensorboard
def test_a_subclass_naming_its_experiment_and_version_writes_there(tmp_path):
    class Named(TensorBoardLogger):
        @property
        def name(self) -> str:
            return "mine"

        @property
        def version(self) -> str:
            return "run-a"

    logger = Named(tmp_path)
    assert logger.root_dir == f"{tmp_path}/mine"
    assert logger.log_dir == f"{tmp_path}/mine/run-a"
    logger.log_metrics({"x": 1.0}, step=0)
    logger.finalize("success")
    assert glob.glob(f"{tmp_path}/mine/run-a/events.out.tfevents.*")


@needs_tensorboard
def test_log_metrics_without_a_step_and_log_hyperparams_without_params(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="exp", default_hp_metric=False)
    logger.log_metrics({"acc": 0.75})
    logger.log_hyperparams()
    logger.log_hyperparams(argparse.Namespace(depth=3))
    logger.finalize("success")

    assert scalars(logger.log_dir)["acc"] == [(0, 0.75)]
    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == {"depth": 3}
