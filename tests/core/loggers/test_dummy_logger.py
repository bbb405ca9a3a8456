"""``DummyLogger``: what ``trainer.logger`` is under ``fast_dev_run``; any call on it or its experiment does nothing."""

from __future__ import annotations

import copy
import pickle
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug.core.module import Module
from torchplug.loggers import CSVLogger
from torchplug.loggers.logger import DummyExperiment, DummyLogger
from torchplug.trainer.trainer import Trainer


def test_any_method_of_the_logger_or_its_experiment_does_nothing():
    logger = DummyLogger()
    assert isinstance(logger.experiment, DummyExperiment)
    assert logger.experiment.add_image("sample", torch.zeros(3, 4, 4), global_step=0) is None
    assert logger.experiment[0].add_histogram("w", torch.zeros(3)) is None  # a list of experiments, as some keep
    logger.experiment["key"] = 1
    assert logger.log_metrics({"loss": 1.0}, step=3) is None
    assert logger.log_hyperparams({"lr": 0.1}) is None
    assert logger.log_table(key="t", columns=["a"], data=[[1]]) is None  # a method only some trackers have
    assert logger[0] is logger
    assert (logger.name, logger.version, logger.save_dir, logger.log_dir) == ("", "", None, None)


@pytest.mark.parametrize("duplicate", [lambda x: pickle.loads(pickle.dumps(x)), copy.deepcopy], ids=["pickle", "copy"])
def test_it_survives_pickling_and_copying(duplicate: Any):
    # ddp_spawn pickles the Trainer with its loggers.
    twin = duplicate(DummyLogger())
    assert isinstance(twin.experiment, DummyExperiment)
    assert twin.experiment.add_scalar("x", 1.0) is None


class UsesItsLogger(Module):
    """Calls its tracker directly, as Lightning code does; under fast_dev_run these calls must not fail."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.logger.experiment.add_histogram("weights", self.layer.weight)
        self.logger.log_metrics({"custom": 1.0}, step=self.global_step)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path: Any, **kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="cpu", default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False, **kwargs
    )


def test_fast_dev_run_replaces_the_loggers_and_writes_nothing(tmp_path):
    trainer = _trainer(tmp_path, fast_dev_run=True, logger=CSVLogger(tmp_path / "logs"))
    assert isinstance(trainer.logger, DummyLogger)
    assert len(trainer.loggers) == 1
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="An epoch has")  # a development run is not told about log intervals
        trainer.fit(UsesItsLogger(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    assert trainer.global_step == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "logger", [None, True, "csv", [CSVLogger("unused"), "csv"]], ids=["default", "True", "name", "list"]
)
def test_fast_dev_run_gives_one_dummy_logger_for_any_logger_asked_for(tmp_path, logger: Any):
    trainer = _trainer(tmp_path, fast_dev_run=2, logger=logger)
    assert [type(lg) for lg in trainer.loggers] == [DummyLogger]


@pytest.mark.parametrize("logger", [False, []], ids=["False", "empty list"])
def test_fast_dev_run_without_loggers_has_none(tmp_path, logger: Any):
    trainer = _trainer(tmp_path, fast_dev_run=True, logger=logger)
    assert trainer.loggers == []
    assert trainer.logger is None
