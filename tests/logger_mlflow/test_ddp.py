"""Under 2-process DDP, ``logger="mlflow"`` makes one run, written by global rank 0 only."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -c constraints.txt mlflow)")

from mlflow import MlflowClient

from tests.core.strategies.runner import environment, train

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_two_processes_log_one_run_from_rank_zero(strategy: str, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = train(
        tmp_path,
        *("--strategy", strategy, "--devices", "2", "--root", str(tmp_path / "root"), "--logger", "mlflow"),
        env=environment(MLFLOW_TRACKING_URI=uri),
    )
    assert result.returncode == 0, result.tail()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("torchplug_logs")
    (run,) = client.search_runs([experiment.experiment_id])  # one run: the other rank never touched the store
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train_loss"))
    assert steps == list(range(8))
