"""The callbacks that synchronise or save, in real 2-process DDP fits over gloo (scripts/ddp_callbacks.py).

Each scenario runs once per module (cached); the tests read what every rank recorded.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.core.strategies.runner import linux_only, reference_state, run

pytestmark = [pytest.mark.slow, linux_only]

SCRIPT = Path(__file__).parent / "scripts" / "ddp_callbacks.py"

Launch = Callable[..., tuple[Path, dict[int, dict[str, Any]]]]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Launch:
    """Run a scenario once (cached) and return its folder and each rank's record."""
    cache: dict[tuple[str, str | None], tuple[Path, dict[int, dict[str, Any]]]] = {}
    root = tmp_path_factory.mktemp("ddp-callbacks")

    def get(scenario: str, resume: str | None = None) -> tuple[Path, dict[int, dict[str, Any]]]:
        key = (scenario, resume)
        if key not in cache:
            out = root / scenario
            out.mkdir()
            command = [sys.executable, str(SCRIPT), "--scenario", scenario, "--out", str(out)]
            if resume is not None:
                command += ["--resume", resume]
            result = run(command, out / "output.log")
            assert result.returncode == 0, result.tail()  # (processes it left are the launcher's tests' concern)
            # A scenario that fails on purpose may see rank 1 stopped by the launcher before it records.
            records = {
                rank: torch.load(out / f"rank{rank}.pt", weights_only=False)
                for rank in (0, 1)
                if (out / f"rank{rank}.pt").exists()
            }
            assert 0 in records, result.tail()
            cache[key] = (out, records)
        return cache[key]

    return get


def assert_same_weights(records: dict[int, dict[str, Any]]) -> None:
    for key, value in records[0]["state_dict"].items():
        torch.testing.assert_close(records[1]["state_dict"][key], value, rtol=0, atol=0, msg=key)


def test_lr_finder_and_ema_agree_on_every_rank(launch: Launch) -> None:
    _, records = launch("ema")

    assert records[0]["lr_finder"] == records[1]["lr_finder"]  # rank 0's results, broadcast
    assert len(records[0]["lr_finder"]["lr"]) == 14
    assert records[0]["lr"] == records[1]["lr"] == records[0]["optimizer_lr"] != 0.05
    assert_same_weights(records)  # the EMA weights, copied into the model when training ended
    assert records[0]["global_step"] == records[1]["global_step"] == 20  # the finder's steps were undone


def test_ema_checkpoint_holds_the_average_and_the_current_weights(launch: Launch) -> None:
    out, records = launch("ema")
    checkpoint = torch.load(out / "final.ckpt", weights_only=True)

    for key, value in records[0]["state_dict"].items():
        torch.testing.assert_close(checkpoint["state_dict"][key], value)
    assert set(checkpoint["current_model_state"]) == set(checkpoint["state_dict"])
    assert checkpoint["callbacks"]["EMAWeightAveraging"]["latest_update_step"] == 20
    assert checkpoint["callbacks"]["Timer"]["time_elapsed"]["train"] > 0


def test_throughput_and_device_stats_are_logged_by_rank_zero(launch: Launch) -> None:
    out, _ = launch("ema")
    with open(out / "logs" / "torchplug_logs" / "version_0" / "metrics.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    columns = set(rows[0])

    assert {"train/time", "train/batches", "train/samples", "train/device/samples_per_sec"} <= columns
    assert "train/samples_per_sec" in columns  # world_size > 1: the rate of both processes
    samples = [float(row["train/samples"]) for row in rows if row.get("train/samples")]
    assert samples[-1] == 20 * 8  # 20 batches of 8 samples on rank 0 (its shard)
    assert any(column.startswith("DeviceStatsMonitor.on_train_batch_end/") for column in columns)


def test_swa_with_batch_norm_ends_equal_on_every_rank(launch: Launch) -> None:
    _, records = launch("swa")

    assert "error" not in records[0], records[0]["error"]
    assert_same_weights(records)  # the averaged weights and the batch-norm statistics reduced over ranks
    assert records[0]["global_step"] == 16


def test_swa_resumes_from_a_checkpoint_in_the_middle_of_its_epochs(launch: Launch) -> None:
    out, uninterrupted = launch("swa")
    checkpoints = sorted((out.parent / "swa-ckpts").glob("epoch=2*.ckpt"))
    assert checkpoints, sorted(p.name for p in (out.parent / "swa-ckpts").iterdir())
    _, resumed = launch("swa-resume", resume=str(checkpoints[0]))

    for key, value in uninterrupted[0]["state_dict"].items():
        torch.testing.assert_close(resumed[0]["state_dict"][key], value, msg=key)
    assert_same_weights(resumed)


def test_on_exception_checkpoint_then_resume_reaches_the_weights_of_an_uninterrupted_run(launch: Launch) -> None:
    out, crashed = launch("exception")
    path = out.parent / "exception" / "on_exception.ckpt"

    assert all("planned failure at step 5" in record["error"] for record in crashed.values())
    assert crashed[0]["global_step"] == 5
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["global_step"] == 5
    _, resumed = launch("exception-resume", resume=str(path))

    expected = reference_state(epochs=2)
    for key, value in expected.items():
        torch.testing.assert_close(resumed[0]["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    assert_same_weights(resumed)


def test_a_spike_on_one_rank_stops_every_rank(launch: Launch) -> None:
    out, records = launch("spike")

    # rank 1 spiked; both stop (rank 0 may report it as its peer's failure, which quotes the same message)
    assert all("Training spike detected in batch 3" in record["error"] for record in records.values())
    assert json.loads((out / "skip.json").read_text()) == [2, 3]


def test_timer_stops_every_rank_at_the_same_step(launch: Launch) -> None:
    _, records = launch("timer")

    assert records[0]["global_step"] == records[1]["global_step"]
    assert 2 <= records[0]["global_step"] < 80  # about 1 s of 0.15 s steps, far from max_epochs=20
    assert records[0]["timer_train"] >= 1.0


def test_train_time_interval_saves_at_the_same_steps_on_every_rank(launch: Launch) -> None:
    out, records = launch("timer")

    # rank 0's clock decides for both: the ranks write the same checkpoints (a disagreement would hang the save)
    assert records[0]["timed_checkpoint"] == records[1]["timed_checkpoint"] != ""
    written = sorted(path.name for path in (out / "timed").iterdir())
    assert (
        Path(records[0]["timed_checkpoint"]).name == written[-1] or Path(records[0]["timed_checkpoint"]).name in written
    )
    assert 1 <= len(written) < records[0]["global_step"]  # about one per 0.4 s of 0.15 s steps


def test_random_pruning_gives_every_rank_the_same_mask(launch: Launch) -> None:
    _, records = launch("timer")
    weight = records[0]["state_dict"]["net.0.weight"]

    assert_same_weights(records)  # rank 0's masks were sent to rank 1
    assert 0.2 < float((weight == 0).float().mean()) < 0.8  # 30% of what is left pruned, once per epoch


def test_prediction_writer_gets_every_sample_once_across_ranks(launch: Launch) -> None:
    out, records = launch("timer")
    written = [torch.load(out / f"predictions_rank{rank}.pt", weights_only=False) for rank in (0, 1)]

    indices = sorted(i for rank in written for batch, _ in rank["batches"] for i in batch)
    assert indices == list(range(30))  # 30 samples over 2 ranks: 15 each, none repeated
    for rank in written:
        flat_epoch = [i for batch in rank["epoch_indices"][0] for i in batch]
        assert flat_epoch == [i for batch, _ in rank["batches"] for i in batch]
        assert len(rank["epoch_predictions"]) == len(rank["batches"])
    # each prediction belongs to the sample its index names: compare with the model's own output
    from tests.core.callbacks.scripts.ddp_callbacks import Net
    from tests.core.strategies.scripts import common

    model = Net()
    model.load_state_dict(records[0]["state_dict"])
    model.eval()
    x, _ = common.dataset(30)[:]
    with torch.no_grad():
        expected = model(x)
    for rank in written:
        for batch, prediction in rank["batches"]:
            torch.testing.assert_close(prediction, expected[batch])


def test_backbone_unfrozen_after_ddp_wrapped_the_model_trains_alike_on_every_rank(launch: Launch) -> None:
    _, records = launch("finetune")

    assert "error" not in records[0], records[0]["error"]
    assert_same_weights(records)  # DDP does not average what it saw frozen: the callback does
    start, end = records[0]["start"]["net.0.weight"], records[0]["state_dict"]["net.0.weight"]
    assert not torch.equal(start, end)  # the backbone trained from epoch 1 on


def test_tuner_lr_find_under_ddp_spawn_returns_its_result_to_the_caller(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--scenario", "tune-spawn", "--out", str(tmp_path)]
    result = run(command, tmp_path / "output.log")
    assert result.returncode == 0, result.tail()
    main = torch.load(tmp_path / "main.pt", weights_only=False)

    assert len(main["results"]["lr"]) == 14
    assert main["suggestion"] is not None and main["lr"] == main["suggestion"]  # set in the caller's model too
    assert main["unchanged"] and main["global_step"] == 0
