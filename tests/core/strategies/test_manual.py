"""Manual optimization under every core strategy: ``manual_backward`` and ``clip_gradients`` in real processes.

The same Regressor written with manual optimization (zero_grad, manual_backward, clip_gradients by
norm, step) must reach the weights of one process summing both ranks' gradients, clipped the same way:
DDP's gradient all-reduce runs inside ``manual_backward``, and under FSDP the clipping norm is taken
over every shard.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import assert_close_states, linux_only, rank_records, reference_state, train

pytestmark = [pytest.mark.slow, linux_only]

CLIP = 0.05
STEPS = 8  # 64 samples, 8 per rank and batch, 2 ranks: 4 steps per epoch, 2 epochs


@pytest.fixture(scope="module")
def clipped() -> dict[str, torch.Tensor]:
    return reference_state(epochs=2, clip=CLIP)


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork", "fsdp"])
def test_manual_optimization_reaches_the_clipped_reference(
    tmp_path: Path, clipped: dict[str, torch.Tensor], strategy: str
) -> None:
    result = train(tmp_path, "--strategy", strategy, "--manual", "--clip", str(CLIP), "--full-state")
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert {r["global_step"] for r in ranks.values()} == {STEPS}  # each optimizer.step() counted once
    if strategy != "fsdp":  # under FSDP the full state is gathered on rank 0 only
        assert ranks[0]["hash"] == ranks[1]["hash"], "the ranks ended with different weights"
    assert_close_states(torch.load(tmp_path / "rank0.pt"), clipped)
    assert not result.leftovers


def test_manual_optimization_in_one_process_matches_automatic_optimization(tmp_path: Path) -> None:
    single = ("--strategy", "single_device", "--devices", "1", "--clip", str(CLIP), "--full-state")
    automatic = train(tmp_path / "automatic", *single)
    manual = train(tmp_path / "manual", *single, "--manual")
    assert automatic.returncode == 0, automatic.tail()
    assert manual.returncode == 0, manual.tail()
    assert_close_states(torch.load(tmp_path / "manual" / "rank0.pt"), torch.load(tmp_path / "automatic" / "rank0.pt"))
