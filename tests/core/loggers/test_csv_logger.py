"""CSVLogger after a real fit: the columns of ``metrics.csv`` and the values in ``hparams.yaml``."""

from __future__ import annotations

import argparse
import csv
import enum
import os

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from tests.core.loggers.conftest import LoggingModel
from torchplug._errors import MisconfigurationError
from torchplug.loggers.csv_logs import CSVLogger, ExperimentWriter
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


def test_a_version_with_metrics_already_is_replaced_with_a_warning(tmp_path):
    earlier = CSVLogger(tmp_path, name="exp")
    earlier.log_metrics({"a": 1.0}, 0)
    earlier.save()

    again = CSVLogger(tmp_path, name="exp", version=0)
    again.log_metrics({"b": 2.0}, 5)
    with pytest.warns(UserWarning, match=r"CSVLogger\(version=0\): .*exp/version_0/metrics.csv exists already.*Hint"):
        again.save()
    again.log_metrics({"b": 3.0}, 6)
    again.save()  # warned once, at the first write

    with open(again.metrics_file, newline="") as stream:
        assert list(csv.DictReader(stream)) == [{"step": "5", "b": "2.0"}, {"step": "6", "b": "3.0"}]


@pytest.mark.parametrize("name", [None, ""], ids=["None", "empty"])
def test_no_name_puts_the_versions_in_save_dir(tmp_path, name):
    os.makedirs(tmp_path / "version_0")
    logger = CSVLogger(tmp_path, name=name)
    logger.log_metrics({"a": 1.0}, 0)
    logger.save()

    assert logger.log_dir == f"{tmp_path}/version_1"
    assert sorted(os.listdir(tmp_path)) == ["version_0", "version_1"]


@pytest.mark.parametrize("every", [0, -5, "10", 2.5, True], ids=["zero", "negative", "str", "float", "bool"])
def test_flush_logs_every_n_steps_must_be_a_positive_int(tmp_path, every):
    with pytest.raises(
        MisconfigurationError, match=rf"CSVLogger\(flush_logs_every_n_steps={every!r}\) is not valid.*Hint"
    ):
        CSVLogger(tmp_path, flush_logs_every_n_steps=every)


def test_sibling_log_dirs_are_the_other_numbered_versions(tmp_path):
    for name in ("version_0", "version_1", "notes"):
        os.makedirs(tmp_path / "exp" / name)
    logger = CSVLogger(tmp_path, name="exp", version=1)
    assert logger.sibling_log_dirs() == [f"{tmp_path}/exp/version_0"]
    assert CSVLogger(tmp_path / "nothing-yet", name="exp").sibling_log_dirs() == []


def test_prefix_is_put_before_every_metric_name_and_is_the_fourth_positional_argument(tmp_path):
    logger = CSVLogger(str(tmp_path), "exp", 0, "train")  # Lightning's order: save_dir, name, version, prefix
    logger.log_metrics({"loss": 0.5, "acc": 0.25}, step=3)
    logger.save()
    with open(logger.metrics_file, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert rows == [{"step": "3", "train-loss": "0.5", "train-acc": "0.25"}]


def test_a_prefix_that_is_not_a_string_is_refused():
    with pytest.raises(MisconfigurationError, match=r"CSVLogger\(prefix=100\) is not valid"):
        CSVLogger(".", "exp", None, 100)  # type: ignore[arg-type]  # a flush interval in the prefix's place


@pytest.mark.parametrize("version", [-4, 1.5, "", True])
def test_a_version_that_names_no_version_directory_is_refused(tmp_path, version):
    from torchplug.loggers.tensorboard import TensorBoardLogger

    for logger in (CSVLogger, TensorBoardLogger):
        with pytest.raises(MisconfigurationError, match=rf"{logger.__name__}\(version={version!r}\) is not valid"):
            logger(str(tmp_path), version=version)
    made = CSVLogger(str(tmp_path))
    with pytest.raises(MisconfigurationError, match="is not valid"):
        made.version = version  # the setter checks too


@pytest.mark.parametrize("kind", ["int", "file"])
def test_a_save_dir_that_is_no_directory_is_refused_naming_it(tmp_path, kind):
    from torchplug.loggers.tensorboard import TensorBoardLogger

    taken = tmp_path / "taken"
    taken.write_text("")
    save_dir, shown = (
        (5, r"save_dir=5\) is not valid") if kind == "int" else (str(taken), r"save_dir='.*taken'\) is a file")
    )
    for logger in (CSVLogger, TensorBoardLogger):
        with pytest.raises(MisconfigurationError, match=rf"{logger.__name__}\({shown}"):
            logger(save_dir)
    assert taken.read_text() == ""  # left as it was


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


def test_the_experiment_is_the_writer_of_metrics_csv_and_hparams_yaml(tmp_path):
    logger = CSVLogger(tmp_path, name="exp")
    writer = logger.experiment
    assert isinstance(writer, ExperimentWriter)
    assert logger.experiment is writer
    assert os.path.isdir(logger.log_dir)  # made with the writer, for files of your own beside the metrics
    assert writer.metrics_file_path == logger.metrics_file == f"{tmp_path}/exp/version_0/metrics.csv"

    writer.log_metrics({"acc": torch.tensor(0.5)}, step=10)
    writer.log_metrics({"acc": 0.75})  # no step: the number of rows logged before it
    assert [row["step"] for row in writer.metrics] == [10, 1]
    writer.log_hparams({"lr": 0.1})
    writer.log_hparams({"layers": 2})
    writer.save()

    assert writer.metrics == []  # written, and cleared
    assert _rows(writer.metrics_file_path) == [{"step": "10", "acc": "0.5"}, {"step": "1", "acc": "0.75"}]
    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == {"lr": 0.1, "layers": 2}  # every call's parameters


def test_log_metrics_without_a_step_counts_the_rows(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    for value in (0.1, 0.2, 0.3):
        logger.log_metrics({"loss": value})
    logger.save()
    assert [row["step"] for row in _rows(logger.metrics_file)] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("params", "written"),
    [(None, {}), (argparse.Namespace(lr=0.1, depth=3), {"lr": 0.1, "depth": 3})],
    ids=["none", "Namespace"],
)
def test_log_hyperparams_takes_no_params_or_a_namespace(tmp_path, params, written):
    logger = CSVLogger(tmp_path)
    if params is None:
        logger.log_hyperparams()
    else:
        logger.log_hyperparams(params)
    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == written


def test_log_hyperparams_refuses_what_is_no_dict(tmp_path):
    with pytest.raises(TypeError, match=r"log_hyperparams\(\) takes a dict or an argparse Namespace, got list"):
        CSVLogger(tmp_path).log_hyperparams([("lr", 0.1)])


def test_a_subclass_naming_its_experiment_and_version_writes_there(tmp_path):
    class Named(CSVLogger):
        @property
        def name(self) -> str:
            return "mine"

        @property
        def version(self) -> str:
            return "run-a"

    logger = Named(tmp_path)
    logger.log_metrics({"x": 1.0}, 0)
    logger.save()
    assert logger.log_dir == f"{tmp_path}/mine/run-a"
    assert os.path.isfile(f"{tmp_path}/mine/run-a/metrics.csv")
