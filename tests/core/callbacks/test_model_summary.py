"""ModelSummary and RichModelSummary: the table of layers printed when fit starts, with Lightning's numbers."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest
import torch

from torchplug import Module
from torchplug.callbacks import ModelSummary, RichModelSummary
from torchplug.utilities.model_summary import get_human_readable_count, summarize


class Net(Module):
    """A frozen first layer, batch norm, a head in eval mode, an example input, and a bare parameter."""

    def __init__(self, bare: bool = False) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)
        self.example_input_array = torch.randn(2, 4)
        self.head.eval()
        for param in self.backbone[0].parameters():
            param.requires_grad = False
        self.scale = torch.nn.Parameter(torch.ones(3)) if bare else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_summary_of_the_direct_children():
    summary = summarize(Net(), max_depth=1)

    assert summary.layer_names == ["backbone", "head"]
    assert summary.layer_types == ["Sequential", "Linear"]
    assert summary.param_nums == [56, 9]
    assert summary.training_modes == [True, False]
    assert summary.in_sizes == [[2, 4], [2, 8]]
    assert summary.out_sizes == [[2, 8], [2, 1]]
    assert summary.flop_counts == {"backbone": 128, "head": 32}
    assert (summary.trainable_parameters, summary.total_parameters) == (25, 65)  # the frozen Linear: 40
    assert summary.total_training_modes == {"train": 4, "eval": 1}
    assert summary.total_flops == 160
    assert summary.model_size == pytest.approx(65 * 4 / 1e6)


def test_the_table_reads_as_lightnings():
    lines = str(summarize(Net(), max_depth=1)).splitlines()

    assert [cell.strip() for cell in lines[0].split("|")] == [
        "",
        "Name",
        "Type",
        "Params",
        "Mode",
        "FLOPs",
        "In sizes",
        "Out sizes",
    ]
    assert [cell.strip() for cell in lines[2].split("|")] == [
        "0",
        "backbone",
        "Sequential",
        "56",
        "train",
        "128",
        "[2, 4]",
        "[2, 8]",
    ]
    assert lines[-7:] == [
        "25        Trainable params",
        "40        Non-trainable params",
        "65        Total params",
        "0.000     Total estimated model params size (MB)",
        "4         Modules in train mode",
        "1         Modules in eval mode",
        "160       Total Flops",
    ]


@pytest.mark.parametrize(("depth", "names"), [
    (2, ["backbone", "backbone.0", "backbone.1", "backbone.2", "head"]),
    (-1, ["backbone", "backbone.0", "backbone.1", "backbone.2", "head"]),
    (0, []),
], ids=["depth-2", "all", "none"])  # fmt: skip
def test_depth(depth, names):
    assert summarize(Net(), max_depth=depth).layer_names == names


def test_parameters_outside_every_layer_get_a_row_of_their_own():
    summary = summarize(Net(bare=True))
    columns = dict(summary.summary_data())
    assert columns["Name"][-1] == "other params"
    assert columns["Params"][-1] == "3  "


def test_without_an_example_input_there_are_no_sizes_and_no_flops():
    model = Net()
    model.example_input_array = None
    summary = summarize(model)
    assert "In sizes" not in dict(summary.summary_data())
    assert summary.total_flops == 0


def test_the_example_forward_leaves_the_modes_as_they_were():
    model = Net()
    summarize(model, max_depth=-1)
    assert model.backbone.training and not model.head.training


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0  "), (123, "123  "), (1234, "1.2 K"), (2e6, "2.0 M"), (3e9, "3.0 B"), (4e14, "400 T"), (5e15, "5,000 T")],
)
def test_human_readable_counts(count, text):
    assert get_human_readable_count(count) == text


def test_the_callback_prints_the_summary_when_fit_starts(make_trainer, data, capsys):
    callback = ModelSummary(max_depth=2)
    make_trainer(max_epochs=1, callbacks=[callback]).fit(Net(), data())
    out = capsys.readouterr().out

    assert "backbone.1 | BatchNorm1d" in out
    assert "65        Total params" in out
    assert callback.summary is not None and callback.summary.total_parameters == 65


def test_max_depth_0_prints_nothing(make_trainer, data, capsys):
    make_trainer(max_epochs=1, callbacks=[ModelSummary(max_depth=0)]).fit(Net(), data())
    assert "Total params" not in capsys.readouterr().out


def test_bad_depth_is_refused():
    with pytest.raises(ValueError, match=r"ModelSummary\(max_depth=-2\)"):
        ModelSummary(max_depth=-2)


def test_rich_summary_draws_a_table(make_trainer, data):
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160, color_system=None)
    make_trainer(max_epochs=1, callbacks=[RichModelSummary(console=console)]).fit(Net(), data())
    out = console.file.getvalue()

    assert "┃ Name" in out and "backbone" in out and "Sequential" in out
    assert "Total params: 65" in out
    assert "Total FLOPs: 160" in out


def test_rich_summary_without_rich_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'core\[rich\]'"):
        RichModelSummary()
