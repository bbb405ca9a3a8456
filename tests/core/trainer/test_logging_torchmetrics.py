"""``self.log`` with torchmetrics Metric objects (torchmetrics from PyPI: ``pip install 'core[torchmetrics]'``).

A Metric's step value is what its last ``forward`` returned, its epoch value ``compute()``, and it
is reset when its epoch or evaluation run ends. The synchronisation over processes is tested with
two real processes in test_logging_ddp.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from tests.core.trainer.models import quiet
from tests.core.trainer.test_logging import MemoryLogger

torchmetrics = pytest.importorskip("torchmetrics", reason="torchmetrics is optional: pip install 'core[torchmetrics]'")


def data(n: int = 32, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Accurate(torchplug.Module):
    """Logs a training Accuracy (forward every step) and a validation Accuracy (update only)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.train_acc = torchmetrics.Accuracy(task="binary")
        self.val_acc = torchmetrics.Accuracy(task="binary")
        self.batch_accuracies: list[float] = []
        self.train_predictions: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.update_counts: dict[str, list[int]] = {"train": [], "val": []}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.layer(x)
        predictions = logits.argmax(-1)
        self.batch_accuracies.append(float(self.train_acc(predictions, y)))
        self.train_predictions.append((predictions.detach(), y))
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        return torch.nn.functional.cross_entropy(logits, y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_acc.update(self.layer(batch[0]).argmax(-1), batch[1])
        self.log("val_acc", self.val_acc)

    def on_train_epoch_start(self) -> None:
        self.update_counts["train"].append(self.train_acc.update_count)
        self.train_predictions.clear()

    def on_validation_start(self) -> None:
        self.update_counts["val"].append(self.val_acc.update_count)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(), batch_size=8)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(16, 1), batch_size=8)


def test_a_metric_logs_its_forward_value_per_step_and_its_compute_per_epoch() -> None:
    model, logger = Accurate(), MemoryLogger()
    trainer = torchplug.Trainer(**quiet(logger=logger, max_epochs=2, log_every_n_steps=1))
    trainer.fit(model)
    assert [row["train_acc_step"] for _, row in logger.rows if "train_acc_step" in row] == pytest.approx(
        model.batch_accuracies
    )
    last_epoch = torch.cat([p for p, _ in model.train_predictions]), torch.cat([y for _, y in model.train_predictions])
    expected = float((last_epoch[0] == last_epoch[1]).float().mean())
    assert [row["train_acc_epoch"] for _, row in logger.rows if "train_acc_epoch" in row][-1] == pytest.approx(expected)
    assert trainer.callback_metrics["train_acc"] == pytest.approx(expected)
    assert "val_acc" in trainer.callback_metrics


def test_metrics_are_reset_when_their_epoch_or_validation_ends() -> None:
    model = Accurate()
    torchplug.Trainer(**quiet(max_epochs=3, num_sanity_val_steps=1)).fit(model)
    assert model.update_counts == {"train": [0, 0, 0], "val": [0, 0, 0, 0]}  # the sanity check's updates too


def test_a_metric_collection_through_log_dict() -> None:
    class Collection(Accurate):
        def __init__(self) -> None:
            super().__init__()
            self.metrics = torchmetrics.MetricCollection(
                {"acc": torchmetrics.Accuracy(task="binary"), "f1": torchmetrics.F1Score(task="binary")}, prefix="val_"
            )

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.metrics.update(self.layer(batch[0]).argmax(-1), batch[1])
            self.log_dict(self.metrics)

    model = Collection()
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    trainer.fit(model)
    assert {"val_acc", "val_f1"} <= set(trainer.callback_metrics)
    results = trainer.validate(model, verbose=False)
    assert set(results[0]) == {"val_acc", "val_f1"}


def test_a_metric_that_is_not_an_attribute_is_refused() -> None:
    class Loose(Accurate):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            metric = torchmetrics.Accuracy(task="binary")
            metric.update(self.layer(batch[0]).argmax(-1), batch[1])
            self.log("loose", metric)

    with pytest.raises(torchplug.MisconfigurationError, match="the Metric is not an attribute of Loose"):
        torchplug.Trainer(**quiet(max_epochs=1)).fit(Loose())


@pytest.mark.parametrize(("attribute", "works"), [("val_acc", True), ("train_acc", False)])
def test_metric_attribute_names_the_attribute_holding_the_metric(attribute: str, works: bool) -> None:
    class Named(Accurate):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.val_acc.update(self.layer(batch[0]).argmax(-1), batch[1])
            self.log("val_acc", self.val_acc, metric_attribute=attribute)

    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    if works:
        trainer.fit(Named())
        assert "val_acc" in trainer.callback_metrics
    else:
        with pytest.raises(torchplug.MisconfigurationError, match="metric_attribute='train_acc'"):
            trainer.fit(Named())


@pytest.mark.parametrize("later", ["a tensor", "another Metric"])
def test_a_name_that_logged_a_metric_refuses_anything_else_later(later: str) -> None:
    class Switches(Accurate):
        def __init__(self) -> None:
            super().__init__()
            self.other_acc = torchmetrics.Accuracy(task="binary")

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            if batch_idx:
                value = loss.detach() if later == "a tensor" else self.other_acc
                self.log("train_acc", value, on_step=True, on_epoch=True)
            return loss

    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_val_batches=0))
    with pytest.raises(torchplug.MisconfigurationError, match=r"self.log\('train_acc', ...\) was first given the "):
        trainer.fit(Switches(), DataLoader(data(), batch_size=8))
