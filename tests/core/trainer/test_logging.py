"""What ``self.log`` records and where it goes: the loggers' rows and steps, and the metrics the Trainer keeps."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet
from torchplug import LoggedValueError, MisconfigurationError
from torchplug.loggers.logger import Logger


class MemoryLogger(Logger):
    """Keeps every row it receives: (step, {name: value})."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.ended: list[str] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def finalize(self, status: str) -> None:
        self.ended.append(status)

    def steps_of(self, key: str) -> list[int]:
        return [step for step, row in self.rows if key in row]


def data(n: int = 48, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Logs(torchplug.Module):
    """Logs ``loss`` on step and epoch in training, ``val_loss`` in validation; 6 training batches of 8."""

    def __init__(self, val_on_step: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.val_on_step = val_on_step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss = torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
        self.log("val_loss", loss, on_step=self.val_on_step)

    test_step = validation_step

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(), batch_size=8)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(24, 1), batch_size=8)

    test_dataloader = val_dataloader


def fit(model: torchplug.Module, **trainer_args: Any) -> tuple[torchplug.Trainer, MemoryLogger]:
    logger = MemoryLogger()
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(logger=logger, **{"max_epochs": 2, **trainer_args}))
    trainer.fit(model)
    return trainer, logger


# -- the loggers' rows -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "accumulate", "step_rows", "epoch_rows"),
    [
        (1, 1, list(range(12)), [5, 11]),
        (2, 1, [1, 3, 5, 7, 9, 11], [5, 11]),
        (4, 1, [3, 7, 11], [5, 11]),
        (50, 1, [], [5, 11]),
        (1, 2, [0, 1, 2, 3, 4, 5], [2, 5]),
        (2, 4, [1, 3], [1, 3]),  # 6 batches, steps after batches 4 and 6 of each epoch
    ],
    ids=["every-step", "every-2", "every-4", "default-50", "accumulate-2", "accumulate-4-every-2"],
)
def test_training_rows_are_logged_at_lightnings_steps(
    every: int, accumulate: int, step_rows: list[int], epoch_rows: list[int]
) -> None:
    """The first step is step 0; step rows every ``log_every_n_steps`` optimizer steps; epoch rows at the last one."""
    _, logger = fit(Logs(), log_every_n_steps=every, accumulate_grad_batches=accumulate, limit_val_batches=0)
    assert logger.steps_of("loss_step") == step_rows
    assert logger.steps_of("loss_epoch") == epoch_rows
    assert all(set(row) == {"loss_step", "epoch"} for _, row in logger.rows if "loss_step" in row)
    assert all(set(row) == {"loss_epoch", "epoch"} for _, row in logger.rows if "loss_epoch" in row)
    assert [row["epoch"] for _, row in logger.rows if "loss_epoch" in row] == [0.0, 1.0]


def test_an_epoch_shorter_than_the_logging_interval_is_warned_about_naming_both() -> None:
    """The default-50 row above writes no step row at all: said, with the value that would write them."""
    with pytest.warns(UserWarning, match=r"An epoch has 6 training batches, fewer than log_every_n_steps=50") as caught:
        fit(Logs(), limit_val_batches=0)
    assert "Trainer(log_every_n_steps=6) or lower" in str(caught[0].message)


@pytest.mark.parametrize(
    "trainer_args", [{"log_every_n_steps": 6}, {"logger": False}], ids=["interval-fits", "no-logger"]
)
def test_no_logging_interval_warning_when_rows_are_written_each_epoch_or_there_is_no_logger(
    trainer_args: dict[str, Any],
) -> None:
    args = {"max_epochs": 1, "limit_val_batches": 0, **trainer_args}
    logger = args.pop("logger", MemoryLogger())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="An epoch has")
        torchplug.Trainer(**quiet(logger=logger, **args)).fit(Logs())


def test_validation_step_values_reach_the_loggers_at_their_own_step() -> None:
    """Per batch, at the count of that dataloader's batches: across the validations of a fit, from 0 in validate()."""
    model = Logs(val_on_step=True)
    trainer, logger = fit(model, log_every_n_steps=50)
    assert logger.steps_of("val_loss_step") == [0, 1, 2, 3, 4, 5]
    assert all(set(row) == {"val_loss_step"} for _, row in logger.rows if "val_loss_step" in row)  # no epoch key
    assert [(step, sorted(row)) for step, row in logger.rows if "val_loss_epoch" in row] == [
        (5, ["epoch", "val_loss_epoch"]),
        (11, ["epoch", "val_loss_epoch"]),
    ]
    logger.rows.clear()
    trainer.validate(model, verbose=False)
    assert logger.steps_of("val_loss_step") == [0, 1, 2]
    assert logger.steps_of("val_loss_epoch") == [12]


def test_a_logged_step_metric_sets_the_row_step() -> None:
    class OwnStep(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("step", float(100 + batch_idx))
            return super().training_step(batch, batch_idx)

    _, logger = fit(OwnStep(), max_epochs=1, log_every_n_steps=3, limit_val_batches=0)
    assert [(step, sorted(row)) for step, row in logger.rows if "loss_step" in row] == [
        (102, ["loss_step"]),
        (105, ["loss_step"]),
    ]


def test_several_validation_dataloaders() -> None:
    class TwoLoaders(Logs):
        def val_dataloader(self) -> list[DataLoader[Any]]:
            return [DataLoader(data(16, 1), batch_size=8), DataLoader(data(8, 2), batch_size=8)]

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            super().validation_step(batch, batch_idx, dataloader_idx)
            self.log(f"seen_{dataloader_idx}", float(batch_idx), add_dataloader_idx=False, reduce_fx="max")

    trainer, logger = fit(TwoLoaders(val_on_step=True), max_epochs=1, log_every_n_steps=50)
    assert [(step, sorted(row)) for step, row in logger.rows if "epoch" not in row] == [
        (0, ["val_loss_step/dataloader_idx_0"]),
        (1, ["val_loss_step/dataloader_idx_0"]),
        (0, ["val_loss_step/dataloader_idx_1"]),
    ]
    assert {"val_loss/dataloader_idx_0", "val_loss_epoch/dataloader_idx_1", "seen_0", "seen_1"} <= set(
        trainer.callback_metrics
    )
    assert trainer.callback_metrics["seen_0"] == 1.0 and trainer.callback_metrics["seen_1"] == 0.0


@pytest.mark.parametrize(
    ("name", "log_kwargs", "error"),
    [
        ("shared", {"add_dataloader_idx": False}, "was called for dataloaders 0 and 1"),
        ("loss/dataloader_idx_0", {}, "the name already holds a dataloader index"),
    ],
    ids=["same-name-without-index", "index-in-the-name"],
)
def test_dataloader_index_mistakes_are_refused(name: str, log_kwargs: dict[str, Any], error: str) -> None:
    class TwoLoaders(Logs):
        def val_dataloader(self) -> list[DataLoader[Any]]:
            return [DataLoader(data(8, 1), batch_size=8), DataLoader(data(8, 2), batch_size=8)]

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log(name, 1.0, **log_kwargs)

    with pytest.raises(torchplug.MisconfigurationError, match=error):
        fit(TwoLoaders(), max_epochs=1)


# -- the metrics the Trainer keeps ------------------------------------------------------------------


def test_logged_and_callback_metrics_hold_tensors_with_lightnings_keys() -> None:
    model = Logs(val_on_step=True)
    trainer, _ = fit(model, log_every_n_steps=50)
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in trainer.logged_metrics.values())
    assert set(trainer.logged_metrics) == {"loss_step", "loss_epoch", "val_loss_step", "val_loss_epoch"}
    # callbacks see training's step values, and validation's epoch values only
    assert set(trainer.callback_metrics) == {"loss", "loss_step", "loss_epoch", "val_loss", "val_loss_epoch"}
    assert trainer.callback_metrics["loss"] == trainer.callback_metrics["loss_epoch"]

    trainer.validate(model, verbose=False)
    assert set(trainer.logged_metrics) == {"val_loss_step", "val_loss_epoch"}
    assert set(trainer.callback_metrics) == {"val_loss", "val_loss_epoch"}
    trainer.test(model, verbose=False)
    assert set(trainer.callback_metrics) == {"val_loss", "val_loss_epoch"}  # test_step logs under the same name


def test_a_number_is_logged_as_a_float_tensor() -> None:
    class LogsInt(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("count", batch_idx, on_step=True)
            return super().training_step(batch, batch_idx)

    trainer, _ = fit(LogsInt(), max_epochs=1, limit_val_batches=0)
    assert trainer.logged_metrics["count"].dtype == torch.float32
    assert trainer.logged_metrics["count"] == 5.0


@pytest.mark.parametrize(
    ("reduce_fx", "expected"),
    [
        ("max", 5.0),
        ("MAX", 5.0),
        (torch.max, 5.0),
        (max, 5.0),
        ("min", 0.0),
        (torch.min, 0.0),
        ("sum", 15.0),
        (torch.sum, 15.0),
        ("mean", 2.5),
        ("avg", 2.5),
        (torch.mean, 2.5),
    ],
    ids=lambda value: getattr(value, "__name__", repr(value)),
)
def test_reduce_fx_by_name_or_function(reduce_fx: Any, expected: float) -> None:
    class Reduces(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("idx", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=reduce_fx)
            return super().training_step(batch, batch_idx)

    trainer, _ = fit(Reduces(), max_epochs=1, limit_val_batches=0)
    assert trainer.callback_metrics["idx"] == expected


def test_an_unknown_reduction_is_refused_with_a_hint() -> None:
    class Median(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("idx", float(batch_idx), on_epoch=True, reduce_fx=torch.median)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="log a torchmetrics Metric that computes it"):
        fit(Median(), max_epochs=1)


class LogsTwice(Logs):
    """Logs ``x`` from the second batch on with ``later`` options (values ``later_value``), else with ``first``."""

    def __init__(self, first: dict[str, Any], later: dict[str, Any], later_value: Any = None) -> None:
        super().__init__()
        self.first, self.later, self.later_value = first, later, later_value

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if batch_idx == 0:
            self.log("x", loss, **self.first)
        else:
            self.log("x", loss if self.later_value is None else self.later_value, **self.later)
        return loss


@pytest.mark.parametrize(
    ("first", "later", "error"),
    [
        ({"prog_bar": True}, {}, r"was called with prog_bar=False, but 'x' was first logged here with prog_bar=True"),
        ({}, {"on_epoch": True}, r"on_epoch=True, but .* with on_epoch=False"),
        ({"on_epoch": True}, {"on_epoch": True, "reduce_fx": "max"}, r"reduce_fx='max', but .* reduce_fx='mean'"),
        ({}, {"logger": False}, r"logger=False, but .* logger=True"),
        ({}, {"sync_dist": True}, r"sync_dist=True, but .* sync_dist=False"),
        ({}, {"enable_graph": True}, r"enable_graph=True"),
        ({"on_epoch": True}, {"on_epoch": True, "reduce_fx": torch.median}, r"choose 'mean', 'sum', 'max' or 'min'"),
    ],
    ids=["prog_bar", "on_epoch", "reduce_fx", "logger", "sync_dist", "enable_graph", "unknown reduce_fx"],
)
def test_logging_a_name_again_with_other_options_is_refused_naming_them(
    first: dict[str, Any], later: dict[str, Any], error: str
) -> None:
    with pytest.raises((MisconfigurationError, ValueError), match=error):
        fit(LogsTwice(first, later), max_epochs=1, limit_val_batches=0)


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ({}, {"on_step": True, "on_epoch": False}),  # the defaults of training_step, spelled out
        ({"on_epoch": True}, {"on_epoch": True, "reduce_fx": torch.mean}),  # "mean" by another name
        ({"sync_dist": True, "rank_zero_only": True}, {"rank_zero_only": True}),  # rank_zero_only never syncs
        ({"prog_bar": 1}, {"prog_bar": True}),
    ],
    ids=["defaults spelled out", "mean and torch.mean", "rank_zero_only", "truthy"],
)
def test_other_spellings_of_the_same_options_are_accepted(first: dict[str, Any], later: dict[str, Any]) -> None:
    trainer, _ = fit(LogsTwice(first, later), max_epochs=1, limit_val_batches=0)
    assert "x" in trainer.callback_metrics


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (torch.ones(3), r"self.log\('x', ...\) needs one number, got a tensor of shape \(3,\)"),
        ("0.5", r"self.log\('x', ...\) needs a number.*got str"),
        ([1.0], r"self.log\('x', ...\) needs a number.*got list"),
    ],
    ids=["vector", "str", "list"],
)
def test_a_bad_value_is_refused_on_any_call_not_only_the_first(value: Any, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        fit(LogsTwice({}, {}, later_value=value), max_epochs=1, limit_val_batches=0)


class LogsValue(Logs):
    """Logs ``value`` as ``x`` in every training step."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("x", self.value)
        return loss


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"a": 1.0, "b": 2.0}, r"self.log\('x', ...\) needs one number, got a dict of 2 values\. Hint: self.log_dict"),
        ({"a": {"b": 1.0}}, r"needs one number, got a dict of 1 values"),
        ("0.5", r"needs a number.*got str"),
        (torch.ones(3), r"got a tensor of shape \(3,\)"),
    ],
    ids=["dict", "nested dict", "str", "vector"],
)
def test_a_value_self_log_cannot_record_is_a_value_error_as_in_lightning(value: Any, error: str) -> None:
    with pytest.raises(LoggedValueError, match=error) as caught:
        fit(LogsValue(value), max_epochs=1, limit_val_batches=0)
    assert isinstance(caught.value, ValueError)  # what Lightning raises
    assert isinstance(caught.value, TypeError)  # what torchplug raised before: code catching it still does


def test_enable_graph_keeps_the_value_attached() -> None:
    kept: list[torch.Tensor] = []

    class Attached(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("attached", loss, enable_graph=True)
            self.log("detached", loss)
            return loss

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            kept.extend([self.trainer.callback_metrics["attached"], self.trainer.callback_metrics["detached"]])

    fit(Attached(), max_steps=1, limit_val_batches=0)
    assert kept[0].grad_fn is not None and kept[1].grad_fn is None


def test_rank_zero_only_values_are_logged_from_rank_zero() -> None:
    class RankZero(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.global_rank == 0:
                self.log("only_here", 1.0, rank_zero_only=True, sync_dist=True)
            return super().training_step(batch, batch_idx)

    _, logger = fit(RankZero(), max_steps=1, log_every_n_steps=1, limit_val_batches=0)
    assert logger.rows[0] == (
        0,
        {"only_here": 1.0, "loss_step": pytest.approx(logger.rows[0][1]["loss_step"]), "epoch": 0.0},
    )


@pytest.mark.parametrize(
    ("hook", "log_kwargs", "error"),
    [
        ("on_fit_start", {}, "was called where nothing is logged"),
        ("on_train_end", {}, "was called where nothing is logged"),
        ("setup", {}, "was called where nothing is logged"),
        ("on_train_epoch_end", {"on_step": True}, "in a start or epoch-end hook: there is no step here"),
        ("on_validation_epoch_start", {"on_step": True}, "in a start or epoch-end hook"),
    ],
)
def test_logging_where_lightning_does_not_log_is_refused(hook: str, log_kwargs: dict[str, Any], error: str) -> None:
    def log_here(self: torchplug.Module, *args: Any, **kwargs: Any) -> None:  # setup gets stage= by keyword
        self.log("x", 1.0, **log_kwargs)

    model = type("LogsInHook", (Logs,), {hook: log_here})()
    with pytest.raises(torchplug.MisconfigurationError, match=error):
        fit(model, max_epochs=1)


def test_logging_in_predict_step_is_refused() -> None:
    class PredictLogs(Logs):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("x", 1.0)
            return self.layer(batch[0])

    trainer = torchplug.Trainer(**quiet())
    with pytest.raises(torchplug.MisconfigurationError, match="was called where nothing is logged"):
        trainer.predict(PredictLogs(), DataLoader(data(8), batch_size=8))


def test_epoch_values_logged_in_epoch_hooks_reach_the_epoch_row() -> None:
    class EpochHook(Logs):
        def on_train_epoch_end(self) -> None:
            self.log("epoch_value", float(self.current_epoch) + 1)

    _, logger = fit(EpochHook(), log_every_n_steps=50, limit_val_batches=0)
    assert [(step, row) for step, row in logger.rows] == [
        (5, {"loss_epoch": pytest.approx(logger.rows[0][1]["loss_epoch"]), "epoch_value": 1.0, "epoch": 0.0}),
        (11, {"loss_epoch": pytest.approx(logger.rows[1][1]["loss_epoch"]), "epoch_value": 2.0, "epoch": 1.0}),
    ]


def test_self_loggers() -> None:
    model = Logs()
    assert model.loggers == []
    seen: list[list[Any]] = []
    first, second = MemoryLogger(), MemoryLogger()

    class Reads(Logs):
        def on_train_start(self) -> None:
            seen.append(self.loggers)

    torchplug.Trainer(**quiet(logger=[first, second], max_steps=1)).fit(Reads())
    assert seen == [[first, second]]


class Predicts(Logs):
    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0])

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(8), batch_size=8)


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_every_stage_ends_the_loggers_run_as_lightning_does(stage: str) -> None:
    logger = MemoryLogger()
    getattr(torchplug.Trainer(**quiet(logger=logger, max_steps=1)), stage)(Predicts())
    assert logger.ended == ["success"]


@pytest.mark.parametrize("enable_progress_bar", [True, False], ids=["with-bar", "without-bar"])
def test_progress_bar_metrics_keep_the_last_values_after_fit(enable_progress_bar: bool) -> None:
    """As in Lightning: a ``prog_bar=True`` metric logged on step and epoch reads ``name_step`` and ``name_epoch``."""

    class Logs(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("twice", float(batch_idx), prog_bar=True, on_step=True, on_epoch=True)
            return loss

    trainer = torchplug.Trainer(
        **quiet(max_epochs=2, limit_train_batches=4, limit_val_batches=1, enable_progress_bar=enable_progress_bar)
    )
    trainer.fit(Logs(), datamodule=BlobData())

    metrics = trainer.progress_bar_metrics
    assert metrics["twice_step"] == 3.0
    assert metrics["twice_epoch"] == pytest.approx(1.5)
    assert {"train_loss", "val_acc"} <= set(metrics)  # logged with prog_bar=True by the classifier
