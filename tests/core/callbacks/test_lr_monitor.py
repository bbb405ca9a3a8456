"""LearningRateMonitor: learning rates reach the loggers under Lightning's names, at the right steps."""

from __future__ import annotations

import csv
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.core.callbacks.conftest import TinyModel
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import Callback, EarlyStopping, LearningRateMonitor
from torchplug.callbacks.lr_monitor import _track
from torchplug.loggers.csv_logs import CSVLogger
from torchplug.trainer.optimizers import LRSchedulerConfig


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


def _sgd(*groups: dict[str, Any]) -> torch.optim.SGD:
    return torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))], **group} for group in groups], lr=0.1)


def _adam(*groups: dict[str, Any]) -> torch.optim.Adam:
    return torch.optim.Adam([{"params": [torch.nn.Parameter(torch.zeros(1))], **group} for group in groups], lr=0.1)


def _scheduled(optimizer: torch.optim.Optimizer, name: str | None = None) -> LRSchedulerConfig:
    return LRSchedulerConfig(torch.optim.lr_scheduler.StepLR(optimizer, 1), name=name)


@pytest.mark.parametrize(
    ("schedulers", "others", "names"),
    [
        ([], [_sgd({})], [["lr-SGD"]]),
        ([], [_sgd({"name": "linear"})], [["lr-SGD/linear"]]),
        ([], [_sgd({}, {"name": "bias"})], [["lr-SGD/pg1", "lr-SGD/bias"]]),
        ([], [_sgd({}), _sgd({}), _adam({})], [["lr-SGD"], ["lr-SGD-1"], ["lr-Adam"]]),
        ([("my_lr", _sgd({}))], [_sgd({})], [["my_lr"], ["lr-SGD"]]),
        ([(None, _adam({})), (None, _adam({}))], [], [["lr-Adam"], ["lr-Adam-1"]]),
        ([("same", _sgd({})), ("same", _adam({}))], [], [["same"], ["same-1"]]),
    ],
    ids=[
        "one-group",
        "one-named-group",
        "groups-named-or-numbered",
        "same-class-twice",
        "named-scheduler",
        "two-schedulers",
        "a-name-given-twice-stays-distinct",
    ],
)
def test_names_are_lightnings(schedulers: list[Any], others: list[Any], names: list[list[str]]) -> None:
    configs = [_scheduled(optimizer, name) for name, optimizer in schedulers]
    trainer = SimpleNamespace(
        lr_scheduler_configs=configs, optimizers=[c.scheduler.optimizer for c in configs] + others
    )
    assert [list(tracked.names) for tracked in _track(trainer)] == names  # type: ignore[arg-type]


def test_parameter_groups_sharing_a_name_are_refused(make_trainer, tiny_model, data, tmp_path):
    class Model(TinyModel):
        def configure_optimizers(self) -> Any:
            groups = [{"params": [self.layer.weight], "name": "w"}, {"params": [self.layer.bias], "name": "w"}]
            return torch.optim.SGD(groups, lr=0.1)

    monitor = LearningRateMonitor()
    trainer = make_trainer(max_epochs=1, limit_val_batches=0, logger=CSVLogger(tmp_path), callbacks=[monitor])
    with pytest.raises(MisconfigurationError, match=r"'lr-SGD' \(SGD\) has several parameter groups named 'w'"):
        trainer.fit(Model(), data())


def test_momentum_of_adam_is_its_first_beta(make_trainer, data, tmp_path):
    class Model(TinyModel):
        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)

    monitor = LearningRateMonitor(log_momentum=True, log_weight_decay=True)
    trainer = make_trainer(max_epochs=1, limit_val_batches=0, logger=CSVLogger(tmp_path), callbacks=[monitor])
    trainer.fit(Model(), data())

    assert monitor.last_momentum_values == {"lr-Adam-momentum": 0.8}
    assert monitor.last_weight_decay_values == {"lr-Adam-weight_decay": 0.1}
    assert monitor.lrs == {"lr-Adam": [0.01]}


def test_the_learning_rate_can_be_monitored_by_early_stopping(make_trainer, tiny_model, data, tmp_path):
    stopping = EarlyStopping(monitor="lr-SGD", stopping_threshold=0.03, check_on_train_epoch_end=True)
    trainer = make_trainer(max_epochs=10, logger=CSVLogger(tmp_path), callbacks=[LearningRateMonitor(), stopping])
    trainer.fit(tiny_model(lr=0.1, scheduler="step_lr"), data())  # 0.1, 0.05, 0.025 at the epochs' starts

    assert float(trainer.callback_metrics["lr-SGD"]) == pytest.approx(0.025)
    assert stopping.stopped_epoch == 2 and trainer.current_epoch == 3


def test_a_parameter_group_added_later_is_named_from_then_on(make_trainer, data, tmp_path):
    class Model(TinyModel):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD([self.layer.weight], lr=0.1)

    class Unfreeze(Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 1:
                trainer.optimizers[0].add_param_group({"params": [pl_module.layer.bias], "lr": 0.01})

    monitor, logger = LearningRateMonitor(), CSVLogger(tmp_path)
    trainer = make_trainer(max_epochs=2, limit_val_batches=0, logger=logger, callbacks=[Unfreeze(), monitor])
    trainer.fit(Model(), data())

    assert monitor.lrs == {"lr-SGD/pg1": [0.1, 0.1], "lr-SGD/pg2": [0.01]}  # the first group keeps its history
