"""LearningRateMonitor: learning rates reach the loggers under Lightning's names, at the right steps."""

from __future__ import annotations

import csv
from typing import Any

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import LearningRateMonitor
from torchplug.loggers.csv_logs import CSVLogger


def rows(logger: CSVLogger, column: str) -> list[tuple[int, float]]:
    """(step, value) of every row of ``metrics.csv`` where ``column`` has a value."""
    with open(logger.metrics_file, newline="") as stream:
        return [(int(row["step"]), float(row[column])) for row in csv.DictReader(stream) if row.get(column)]


def test_logs_the_learning_rate_across_a_step_lr_schedule(tmp_path, make_trainer, tiny_model, data):
    logger = CSVLogger(tmp_path)
    trainer = make_trainer(max_epochs=3, logger=logger, callbacks=[LearningRateMonitor()])
    trainer.fit(tiny_model(lr=0.1, scheduler="step_lr"), data())

    # StepLR(step_size=1, gamma=0.5) is an epoch scheduler: logged at the start of each epoch.
    assert rows(logger, "lr-SGD") == [(0, 0.1), (8, 0.05), (16, 0.025)]


def test_step_interval_logs_every_log_every_n_steps(tmp_path, make_trainer, tiny_model, data):
    logger = CSVLogger(tmp_path)
    monitor = LearningRateMonitor(logging_interval="step", log_momentum=True, log_weight_decay=True)
    trainer = make_trainer(max_epochs=2, logger=logger, log_every_n_steps=4, callbacks=[monitor])
    trainer.fit(tiny_model(lr=0.1, scheduler="step_lr"), data())

    # at the loggers' steps of the step metrics (Lightning's): before batches 3, 7, 11 and 15
    assert rows(logger, "lr-SGD") == [(3, 0.1), (7, 0.1), (11, 0.05), (15, 0.05)]
    assert rows(logger, "lr-SGD-momentum")[0] == (3, 0.9)
    assert rows(logger, "lr-SGD-weight_decay")[0] == (3, 0.0)
    assert monitor.last_values["lr-SGD"] == 0.05


def test_parameter_groups_and_named_schedulers(tmp_path, make_trainer, tiny_model, data):
    class Model(tiny_model().__class__):  # type: ignore[misc]
        def configure_optimizers(self) -> Any:
            adam = torch.optim.Adam(
                [{"params": [self.layer.weight], "lr": 0.01}, {"params": [self.layer.bias], "lr": 0.02, "name": "bias"}]
            )
            return {
                "optimizer": adam,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.StepLR(adam, 1),
                    "name": "my_lr",
                    "interval": "step",
                },
            }

    logger = CSVLogger(tmp_path)
    monitor = LearningRateMonitor(log_momentum=True)
    make_trainer(max_epochs=1, logger=logger, log_every_n_steps=4, callbacks=[monitor]).fit(Model(), data())

    assert set(monitor.last_values) == {"my_lr/pg1", "my_lr/bias", "my_lr/pg1-momentum", "my_lr/bias-momentum"}
    step, lr = rows(logger, "my_lr/pg1")[0]
    assert step == 3 and lr == pytest.approx(0.01 * 0.1**3)  # StepLR(gamma=0.1) stepped after batches 0, 1 and 2
    assert rows(logger, "my_lr/bias-momentum")[0] == (3, 0.9)  # Adam's betas[0]
    assert [step for step, _ in rows(logger, "my_lr/pg1")] == [3, 7]  # a step scheduler: not at epoch starts


def test_needs_a_logger(make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=1, logger=False, callbacks=[LearningRateMonitor()])
    with pytest.raises(MisconfigurationError, match=r"LearningRateMonitor needs a logger: Trainer\(logger=\.\.\.\)"):
        trainer.fit(tiny_model(), data())


def test_invalid_interval():
    with pytest.raises(MisconfigurationError, match="logging_interval='batch'"):
        LearningRateMonitor(logging_interval="batch")
