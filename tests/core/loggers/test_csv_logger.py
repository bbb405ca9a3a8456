"""CSVLogger after a real fit: the columns of ``metrics.csv`` and the values in ``hparams.yaml``."""

from __future__ import annotations

import csv
import enum

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from tests.core.loggers.conftest import LoggingModel
from torchplug.loggers.csv_logs import CSVLogger
from torchplug.trainer.trainer import Trainer


def test_metrics_csv_has_step_and_epoch_columns(tmp_path, fit_with):
    logger = CSVLogger(tmp_path, name="exp")
    fit_with(logger, enable_checkpointing=False)

    assert logger.log_dir == f"{tmp_path}/exp/version_0"
    with open(logger.metrics_file, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert set(rows[0]) == {"step", "epoch", "train_loss_step", "train_loss_epoch", "val_loss"}
    step_rows = [r for r in rows if r["train_loss_step"]]
    # Lightning's logger steps: the count of batches that stepped before this one, logged every
    # log_every_n_steps=2 batches; the epoch's values at the step of its last batch
    assert [int(r["step"]) for r in step_rows] == [1, 3, 5, 7, 9, 11, 13, 15]
    epoch_rows = [r for r in rows if r["train_loss_epoch"]]
    assert [(int(r["step"]), float(r["epoch"])) for r in epoch_rows] == [(7, 0.0), (15, 1.0)]
    assert len([r for r in rows if r["val_loss"]]) == 2


def test_hparams_yaml_holds_the_saved_hyperparameters(tmp_path, fit_with):
    logger = CSVLogger(tmp_path)
    fit_with(logger, enable_checkpointing=False)

    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == {"lr": 0.01, "hidden": 4, "name": "regression"}


def test_each_run_gets_the_next_version(tmp_path, fit_with):
    first, second = CSVLogger(tmp_path), CSVLogger(tmp_path)
    fit_with(first, enable_checkpointing=False, max_epochs=1)
    fit_with(second, enable_checkpointing=False, max_epochs=1)
    assert (first.version, second.version) == (0, 1)


class _Colour(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


def test_hparams_yaml_writes_library_numbers_nested_objects_and_enums_as_plain_data(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams(
        {
            "lr": np.float64(0.01),
            "layers": np.int64(3),
            "scale": torch.tensor(0.5),
            "class_weights": torch.tensor([1.0, 2.0]),
            "optimizer": {"betas": (0.9, 0.99), "cls": torch.optim.SGD, "eps": [np.float32(0.5)]},
            "colour": _Colour.RED,
            "level": _Level.HIGH,
            "shape": (4, 1),
        }
    )

    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        written = yaml.safe_load(stream)
    assert written == {
        "lr": 0.01,
        "layers": 3,
        "scale": 0.5,
        "class_weights": "tensor([1., 2.])",
        "optimizer": {"betas": [0.9, 0.99], "cls": repr(torch.optim.SGD), "eps": [0.5]},
        "colour": "red",
        "level": 3,
        "shape": [4, 1],
    }


def test_fit_logs_a_numpy_hyperparameter(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    logger = CSVLogger(tmp_path)
    trainer = Trainer(accelerator="cpu", logger=logger, max_epochs=1, enable_progress_bar=False)
    trainer.fit(LoggingModel(lr=np.float64(0.01)), loader)

    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream)["lr"] == 0.01
