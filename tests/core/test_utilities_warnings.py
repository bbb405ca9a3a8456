"""``PossibleUserWarning``: the warnings about likely mistakes, which a user who meant it silences as a group."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug.core.module import Module
from torchplug.loggers.logger import Logger
from torchplug.trainer.trainer import Trainer
from torchplug.utilities.warnings import PossibleUserWarning


class Rows(Logger):
    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass


class Regression(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(model: Module, **kwargs: Any) -> None:
    data = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=4)  # 3 batches an epoch
    kwargs = {"logger": Rows(), "enable_checkpointing": False, "enable_progress_bar": False, **kwargs}
    Trainer(accelerator="cpu", max_epochs=1, enable_model_summary=False, **kwargs).fit(model, data)


def test_it_is_a_user_warning():
    assert issubclass(PossibleUserWarning, UserWarning)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (Regression, r"An epoch has 3 training batches, fewer than log_every_n_steps=50"),
        (lambda: Regression().eval(), r"module\(s\) are in eval mode at the start of training"),
    ],
    ids=["epoch shorter than log_every_n_steps", "modules in eval mode"],
)
def test_likely_mistakes_are_possible_user_warnings(make: Any, message: str):
    with pytest.warns(PossibleUserWarning, match=message):
        _fit(make())


def test_filtering_the_category_silences_them():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
        _fit(Regression().eval())
    shown = [str(w.message) for w in caught]
    assert not [m for m in shown if "log_every_n_steps" in m or "eval mode" in m]
