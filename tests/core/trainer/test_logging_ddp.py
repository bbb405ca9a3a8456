"""``self.log`` over two real processes (strategy="ddp", gloo on the CPU): what is synchronised and what is not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.core.strategies.runner import linux_only, run

pytest.importorskip("torchmetrics", reason="torchmetrics is optional: pip install 'core[torchmetrics]'")

pytestmark = [pytest.mark.slow, linux_only]

SCRIPT = Path(__file__).parent / "scripts" / "ddp_logging.py"


def test_metrics_sync_dist_and_rank_zero_only_across_two_processes(tmp_path: Path) -> None:
    result = run([sys.executable, str(SCRIPT), str(tmp_path)], tmp_path / "output.log")
    assert result.returncode == 0, result.tail()
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    metrics = [r["callback_metrics"] for r in ranks]

    # a torchmetrics Metric computes over both processes' updates: the accuracy of all 40 samples, on both ranks
    pairs = [(p, y) for r in ranks for predictions, labels in r["seen"] for p, y in zip(predictions, labels)]
    assert len(pairs) == 40
    accuracy = sum(p == y for p, y in pairs) / len(pairs)
    assert metrics[0]["val_acc"] == pytest.approx(accuracy) and metrics[1]["val_acc"] == pytest.approx(accuracy)
    # sync_dist=True: the mean over the ranks; without it, each rank's own value
    assert [m["synced"] for m in metrics] == [0.5, 0.5]
    assert [m["local"] for m in metrics] == [0.0, 1.0]
    # rank_zero_only=True is never synchronised, even with sync_dist=True
    assert [m["zero_only"] for m in metrics] == [0.0, 1.0]
    # the value without sync_dist is warned about, once, by rank 0 only; the synced ones and the Metric are not
    unsynced = [line for line in result.output.splitlines() if "without sync_dist=True under 2 processes" in line]
    assert len(unsynced) == 1 and "self.log('local', ...)" in unsynced[0], result.tail()
