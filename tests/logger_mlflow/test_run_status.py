"""The run a ``MLFlowLogger`` opens or reopens is closed by every stage, and by the end of the process.

Each test reads the status back from a real sqlite store with MLflow's own client.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -c constraints.txt mlflow)")

from mlflow import MlflowClient

from tests.logger_mlflow.conftest import Regressor, history
from tests.logger_support import loader, trainer
from torchplug_mlflow import MLFlowLogger

ROOT = Path(__file__).resolve().parents[2]


class Evaluated(Regressor):
    """The regressor with a validation, test and predict step; each stage leaves a trace in the run."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def on_predict_start(self) -> None:
        self.logger.log_metrics({"predicting": 1.0}, step=0)  # self.log is refused in predict, as in Lightning

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.hparams.fail_at == -2:
            raise RuntimeError("the model failed on purpose")
        return self.layer(batch[0])


def finished_run(sqlite_uri: str, root: Path, experiment: str) -> str:
    """The id of a run one fit wrote and closed (``FINISHED``), as the README's first lines leave it."""
    first = MLFlowLogger(experiment, tracking_uri=sqlite_uri)
    trainer(root, first, max_epochs=1, enable_checkpointing=False).fit(Regressor(), loader())
    assert MlflowClient(sqlite_uri).get_run(first.run_id).info.status == "FINISHED"
    return first.run_id


def status(sqlite_uri: str, run_id: str) -> str:
    value: str = MlflowClient(sqlite_uri).get_run(run_id).info.status
    return value


def test_reading_a_resumed_loggers_names_leaves_its_run_finished(sqlite_uri: str, tmp_path: Path) -> None:
    run_id = finished_run(sqlite_uri, tmp_path, "read-only")
    resumed = MLFlowLogger("read-only", tracking_uri=sqlite_uri, run_id=run_id)
    experiment_id = MlflowClient(sqlite_uri).get_run(run_id).info.experiment_id
    assert (resumed.version, resumed.run_id, resumed.name) == (run_id, run_id, experiment_id)
    assert status(sqlite_uri, run_id) == "FINISHED"


@pytest.mark.parametrize(("stage", "key"), [("validate", "val_loss"), ("test", "test_loss"), ("predict", "predicting")])
def test_an_evaluation_stage_closes_the_run_it_reopened(stage: str, key: str, sqlite_uri: str, tmp_path: Path) -> None:
    run_id = finished_run(sqlite_uri, tmp_path, f"reopened-by-{stage}")
    resumed = MLFlowLogger(f"reopened-by-{stage}", tracking_uri=sqlite_uri, run_id=run_id)
    getattr(trainer(tmp_path, resumed), stage)(Evaluated(), loader())
    assert history(MlflowClient(sqlite_uri), run_id, key)  # the stage did write to the run
    assert status(sqlite_uri, run_id) == "FINISHED"


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_an_evaluation_stage_closes_the_run_it_started(stage: str, sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger(f"started-by-{stage}", tracking_uri=sqlite_uri)
    getattr(trainer(tmp_path, logger), stage)(Evaluated(), loader())
    assert status(sqlite_uri, logger.run_id) == "FINISHED"


def test_a_failed_evaluation_marks_the_run_failed(sqlite_uri: str, tmp_path: Path) -> None:
    run_id = finished_run(sqlite_uri, tmp_path, "failed-predict")
    resumed = MLFlowLogger("failed-predict", tracking_uri=sqlite_uri, run_id=run_id)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        trainer(tmp_path, resumed).predict(Evaluated(fail_at=-2), loader())
    assert status(sqlite_uri, run_id) == "FAILED"


def test_a_second_stage_reopens_the_run_and_closes_it_again(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("fit-then-test", tracking_uri=sqlite_uri)
    run = trainer(tmp_path, logger, max_epochs=1, enable_checkpointing=False)
    model = Evaluated()
    run.fit(model, loader())
    assert status(sqlite_uri, logger.run_id) == "FINISHED"
    run.test(model, loader())
    assert history(MlflowClient(sqlite_uri), logger.run_id, "test_loss")
    assert status(sqlite_uri, logger.run_id) == "FINISHED"


SCRIPT = """
import sys
from mlflow import MlflowClient
from torchplug_mlflow import MLFlowLogger

uri, run_id, ending = sys.argv[1], sys.argv[2] or None, sys.argv[3]
logger = MLFlowLogger("at-exit", tracking_uri=uri, run_id=run_id)
if run_id is None:
    print(logger.version)  # starts a new run
else:
    logger.experiment.set_tag(logger.run_id, "touched", "yes")  # reopens the run to write to it
if ending == "error":
    raise RuntimeError("the script failed")
if ending == "interrupt":
    raise KeyboardInterrupt
"""


def run_script(sqlite_uri: str, run_id: str | None, ending: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", textwrap.dedent(SCRIPT), sqlite_uri, run_id or "", ending]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("ending", "expected"), [("normally", "FINISHED"), ("error", "FAILED"), ("interrupt", "KILLED")]
)
def test_the_end_of_the_process_closes_the_run_it_reopened(
    ending: str, expected: str, sqlite_uri: str, tmp_path: Path
) -> None:
    run_id = finished_run(sqlite_uri, tmp_path, "at-exit")
    result = run_script(sqlite_uri, run_id, ending)
    assert (result.returncode == 0) == (ending == "normally"), result.stderr
    assert MlflowClient(sqlite_uri).get_run(run_id).data.tags["touched"] == "yes"
    assert status(sqlite_uri, run_id) == expected


def test_the_end_of_the_process_closes_a_run_started_by_reading_its_version(sqlite_uri: str) -> None:
    result = run_script(sqlite_uri, None, "normally")
    assert result.returncode == 0, result.stderr
    assert status(sqlite_uri, result.stdout.strip().splitlines()[-1]) == "FINISHED"


def test_a_run_that_was_already_running_is_left_to_whoever_runs_it(sqlite_uri: str) -> None:
    client = MlflowClient(sqlite_uri)
    experiment = client.get_experiment_by_name("at-exit") or client.get_experiment(client.create_experiment("at-exit"))
    someone_elses = client.create_run(experiment.experiment_id).info.run_id
    result = run_script(sqlite_uri, someone_elses, "normally")
    assert result.returncode == 0, result.stderr
    assert client.get_run(someone_elses).data.tags["touched"] == "yes"
    assert status(sqlite_uri, someone_elses) == "RUNNING"
