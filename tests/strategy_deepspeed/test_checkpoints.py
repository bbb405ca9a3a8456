"""DeepSpeed's sharded checkpoints: exact resume, evaluation from a directory, weights-only files, consolidation."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import rank_records
from tests.core.strategies.scripts.common import Regressor, dataset
from tests.strategy_deepspeed.conftest import train
from torchplug_deepspeed import consolidate
from torchplug_deepspeed.__main__ import main as consolidate_command

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("deepspeed_ops")]

STEPS = 8
#: A schedule stepped every step and dropout drawing from the RNG: a resume must restore both exactly.
EXACT = ("--scheduler", "--dropout", "0.2")

Trained = Callable[[int], Path]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """Per ZeRO stage: a run that checkpoints every step, then validates from a directory and saves its weights."""
    cache: dict[int, Path] = {}

    def get(stage: int) -> Path:
        if stage not in cache:
            out = tmp_path_factory.mktemp(f"stage{stage}")
            result = train(
                out,
                "--strategy",
                f"deepspeed_stage_{stage}",
                *EXACT,
                "--checkpoint-dir",
                str(out / "ckpts"),
                "--validate-ckpt",
                str(out / "ckpts" / f"epoch=1-step={STEPS}.ckpt"),
                "--save-weights",
                str(out / "weights.ckpt"),
                "--save-ckpt",
                str(out / "final.ckpt"),
            )
            assert result.returncode == 0, result.tail()
            assert not result.leftovers
            cache[stage] = out
        return cache[stage]

    return get


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    """The full state dict rank 0 gathered at the end of fit."""
    return torch.load(out / "rank0.pt")  # type: ignore[no-any-return]


@pytest.mark.parametrize("stage", [2, 3])
def test_fit_resumes_exactly_from_a_directory_written_mid_epoch(trained: Trained, tmp_path: Path, stage: int) -> None:
    source = trained(stage)
    checkpoint = source / "ckpts" / "epoch=0-step=3.ckpt"
    assert checkpoint.is_dir()
    result = train(tmp_path, "--strategy", f"deepspeed_stage_{stage}", *EXACT, "--resume", str(checkpoint))
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert {r["global_step"] for r in ranks.values()} == {STEPS}
    assert {r["batches_run"] for r in ranks.values()} == {STEPS - 3}  # it did resume: only the rest ran
    # Bitwise: weights, momentum, the schedule's position and the dropout masks all continued.
    assert ranks[0]["hash"] == rank_records(source)[0]["hash"]


@pytest.mark.parametrize("stage", [2, 3])
def test_a_directory_consolidates_into_one_ordinary_checkpoint(trained: Trained, tmp_path: Path, stage: int) -> None:
    source = trained(stage)
    written = consolidate(source / "final.ckpt", tmp_path / "one.ckpt")
    assert written == str(tmp_path / "one.ckpt")
    checkpoint = torch.load(written, weights_only=True)
    assert checkpoint["global_step"] == STEPS
    assert "optimizer_states" not in checkpoint and "loops" not in checkpoint  # those lived in the shards
    model = Regressor.load_from_checkpoint(written)
    assert model.hparams.dropout == 0.2
    full = final_weights(source)
    for key, value in model.state_dict().items():
        assert torch.equal(value, full[key]), key
    code = consolidate_command(["consolidate", str(source / "final.ckpt"), str(tmp_path / "cli.ckpt")])
    assert code == 0 and (tmp_path / "cli.ckpt").is_file()
    # The core's command reads DeepSpeed's directories too (strategy-deepspeed answers its reader hook).
    from torchplug.cli import main as core

    assert core(["checkpoint", "consolidate", str(source / "final.ckpt"), str(tmp_path / "core.ckpt")]) == 0
    assert all(
        torch.equal(v, full[k])
        for k, v in Regressor.load_from_checkpoint(str(tmp_path / "core.ckpt")).state_dict().items()
    )
    assert core(["checkpoint", "inspect", str(source / "final.ckpt")]) == 0


@pytest.mark.parametrize("stage", [2, 3])
def test_a_weights_only_checkpoint_is_one_file(trained: Trained, stage: int) -> None:
    source = trained(stage)
    assert (source / "weights.ckpt").is_file()
    model = Regressor.load_from_checkpoint(str(source / "weights.ckpt"))
    full = final_weights(source)
    assert all(torch.equal(v, full[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("stage", [2, 3])
def test_validate_reads_the_weights_from_a_directory(trained: Trained, stage: int) -> None:
    source = trained(stage)
    (results,) = json.loads((source / "validate.json").read_text())["results"]
    model = Regressor.load_from_checkpoint(str(source / "weights.ckpt")).eval()
    x, y = dataset(64)[:]
    with torch.no_grad():
        expected = torch.nn.functional.mse_loss(model(x), y).item()
    assert results["val_loss"] == pytest.approx(expected, rel=1e-5)


def test_the_command_line_refuses_what_is_not_a_deepspeed_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = consolidate_command(["consolidate", str(tmp_path), str(tmp_path / "out.ckpt")])
    assert code == 2
    assert "is not a DeepSpeed checkpoint directory" in capsys.readouterr().err
