"""Each TrainerCLI's errors name its own program, arguments and options, with other CLIs in the same process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchplug
from tests.core.cli.tiny import TinyData, TinyModel
from torchplug.cli import TrainerCLI

QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]


class WideModel(torchplug.Module):
    """A model whose options differ from TinyModel's (``width``, not ``hidden``)."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, width)


class BuildsAnotherCLI(TinyModel):
    """A model that builds a second CLI while the first one is instantiating it."""

    def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
        super().__init__(hidden, lr)
        self.inner = TrainerCLI(WideModel, TinyData, run=False, prog="inner", args=["--model.width=6", *QUIET])


def _error_of(cli: TrainerCLI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Parse a config with a model option at the top level: the suggestion comes from ``cli``'s own options."""
    config = tmp_path / "config.yaml"
    config.write_text("hidden: 3\n")
    with pytest.raises(SystemExit) as info:
        cli.parser.parse_args(["--config", str(config)])
    assert info.value.code == 2
    return capsys.readouterr().err


def test_two_clis_in_one_process_keep_their_own_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = TrainerCLI(TinyModel, TinyData, run=False, prog="first", args=["--model.hidden=4", *QUIET])
    TrainerCLI(WideModel, TinyData, run=False, prog="second", args=["--model.width=6", *QUIET])

    err = _error_of(first, tmp_path, capsys)

    # The choices of the first CLI's parser, not the second's (which has --model.width).
    assert "first: error: hidden (in a config file): no such option. Did you mean '--model.hidden'?" in err


def test_a_cli_built_inside_another_leaves_the_outer_one_its_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outer = TrainerCLI(BuildsAnotherCLI, TinyData, run=False, prog="outer", args=["--model.hidden=4", *QUIET])
    assert isinstance(outer.model, BuildsAnotherCLI) and outer.model.inner.model is not None

    err = _error_of(outer, tmp_path, capsys)

    assert "outer: error: hidden (in a config file): no such option. Did you mean '--model.hidden'?" in err
