"""What the progress bars show beside the progress: the ``prog_bar=True`` metrics and ``v_num``, as in Lightning 2.x.

Lightning 2.x adds no ``loss`` of its own (the model logs the loss it wants shown); a finished
epoch's bar keeps the values it ended with; the rich bar says ``Epoch i/last``.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
import torch

from tests.core.callbacks.conftest import TinyModel
from torchplug.callbacks import RichProgressBar, TQDMProgressBar
from torchplug.loggers.csv_logs import CSVLogger


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class StepLoss(TinyModel):
    """Logs the loss under the name it wants shown, per step only (as the digits example does)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss


def tqdm_bar(**kwargs: Any) -> tuple[TQDMProgressBar, io.StringIO]:
    stream = Terminal()
    return TQDMProgressBar(stream=stream, **kwargs), stream


def rich_bar(**kwargs: Any) -> tuple[RichProgressBar, io.StringIO]:
    stream = io.StringIO()
    console = {"file": stream, "force_terminal": True, "width": 200, "color_system": None}
    return RichProgressBar(console_kwargs=console, **kwargs), stream


def fit(make_trainer, data, bar, **kwargs: Any) -> None:
    kwargs.setdefault("max_epochs", 2)
    make_trainer(enable_progress_bar=True, callbacks=[bar], **kwargs).fit(StepLoss(), data(), data())


def renders(output: str) -> list[str]:
    """Every state the bar was drawn in (tqdm redraws in place after a carriage return; rich too)."""
    return [part for part in re.split(r"[\r\n]", output) if "Epoch" in part]


@pytest.mark.parametrize("make_bar", [tqdm_bar, rich_bar], ids=["tqdm", "rich"])
def test_the_loss_is_shown_once_under_the_name_it_was_logged(make_trainer, data, make_bar):
    bar, stream = make_bar()
    fit(make_trainer, data, bar)
    drawn = renders(stream.getvalue())

    assert any("train_loss" in line for line in drawn)
    assert not any(re.search(r"(?<![\w])loss[=:]", line) for line in drawn)  # no 'loss' of the bar's own


@pytest.mark.parametrize("make_bar", [tqdm_bar, rich_bar], ids=["tqdm", "rich"])
@pytest.mark.parametrize("leave", [False, True], ids=["one-bar", "leave"])
def test_the_final_bar_keeps_the_values_the_epoch_ended_with(make_trainer, data, make_bar, leave):
    bar, stream = make_bar(leave=leave)
    fit(make_trainer, data, bar)
    last = renders(stream.getvalue())[-1]

    assert "8/8" in last and "train_loss" in last, last  # the fit's end does not wipe the epoch's values


@pytest.mark.parametrize(
    ("limits", "descriptions"),
    [
        ({"max_epochs": 2}, ["Epoch 0/1", "Epoch 1/1"]),
        ({"max_epochs": -1, "max_steps": 10}, ["Epoch 0 ", "Epoch 1 "]),  # no last epoch to show
    ],
    ids=["max_epochs", "unbounded"],
)
def test_the_rich_bar_says_which_epoch_of_how_many(make_trainer, data, limits, descriptions):
    bar, stream = rich_bar(leave=True)
    fit(make_trainer, data, bar, **limits)
    drawn = stream.getvalue()

    for description in descriptions:
        assert description in drawn, description
    assert "/-" not in drawn


def test_a_text_version_shows_its_last_four_characters(make_trainer, data, tmp_path):
    bar, stream = tqdm_bar()
    fit(make_trainer, data, bar, logger=CSVLogger(tmp_path, version="run_abcd1234"))
    assert "v_num=1234" in stream.getvalue()
