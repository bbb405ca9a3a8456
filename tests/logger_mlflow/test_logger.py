"""MLFlowLogger against real stores (a sqlite database, an ``mlflow server``), read back with MLflow's own client."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -c constraints.txt mlflow)")

from mlflow import MlflowClient

from tests.logger_mlflow.conftest import Regressor, history
from tests.logger_support import loader, trainer
from torchplug import MisconfigurationError
from torchplug.callbacks import ModelCheckpoint
from torchplug_mlflow import MLFlowLogger

OPTIMIZER = {"name": "SGD", "momentum": 0.9}


def test_a_fit_logs_metrics_params_tags_and_ends_the_run(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("fit", run_name="first", tracking_uri=sqlite_uri, tags={"team": "vision"})
    run = trainer(tmp_path, logger)
    with pytest.warns(UserWarning, match=r"refuses the metric name 'loss@scaled'; it is logged as 'loss_scaled'"):
        run.fit(Regressor(optimizer=OPTIMIZER), loader())
    client = MlflowClient(sqlite_uri)
    record = client.get_run(logger.run_id)
    assert record.info.status == "FINISHED"
    assert record.info.run_name == "first"
    assert client.get_experiment(record.info.experiment_id).name == "fit"
    assert record.data.params == {"lr": "0.05", "optimizer/name": "SGD", "optimizer/momentum": "0.9", "fail_at": "-1"}
    assert record.data.tags["team"] == "vision"
    assert "mlflow.source.name" in record.data.tags
    losses = history(client, logger.run_id, "train_loss")
    assert [step for step, _ in losses] == list(range(8))
    assert losses[-1][1] == pytest.approx(float(run.logged_metrics["train_loss"]))
    assert [step for step, _ in history(client, logger.run_id, "loss_scaled")] == list(range(8))
    assert (logger.name, logger.version) == (record.info.experiment_id, logger.run_id)


def test_by_name_the_store_is_mlflow_tracking_uri(
    sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_uri)
    run = trainer(tmp_path, ["csv", "mlflow"], max_epochs=1)
    run.fit(Regressor(), loader())
    logger = run.loggers[1]
    assert isinstance(logger, MLFlowLogger)
    assert logger.tracking_uri == sqlite_uri
    assert len(history(MlflowClient(sqlite_uri), logger.run_id, "train_loss")) == 4
    assert run.log_dir == run.loggers[0].log_dir  # the first logger's


def test_by_name_without_a_tracking_uri_the_store_is_under_default_root_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = trainer(tmp_path, "mlflow", max_epochs=1, enable_checkpointing=False)
    run.fit(Regressor(), loader())
    logger = run.logger
    assert isinstance(logger, MLFlowLogger)
    assert logger.save_dir == str(tmp_path / "mlruns")
    assert (tmp_path / "mlruns" / "mlflow.db").is_file()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert len(history(client, logger.run_id, "train_loss")) == 4


@pytest.mark.parametrize(
    ("log_model", "uploaded"),
    [(True, ["epoch=1-step=8", "last"]), ("all", ["epoch=0-step=4", "epoch=1-step=8", "last"])],
    ids=["at-the-end", "all"],
)
def test_checkpoints_become_run_artifacts_when_asked(
    log_model: bool | str, uploaded: list[str], sqlite_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    logger = MLFlowLogger(f"checkpoints-{log_model}", tracking_uri=sqlite_uri, log_model=log_model)  # type: ignore[arg-type]
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="train_loss", save_top_k=1, save_last=True)
    trainer(tmp_path, logger, callbacks=[checkpoint]).fit(Regressor(), loader())
    client = MlflowClient(sqlite_uri)
    listed = sorted(Path(a.path).name for a in client.list_artifacts(logger.run_id, "checkpoints"))
    assert listed == uploaded
    local = client.download_artifacts(logger.run_id, "checkpoints/last", str(tmp_path / "down"))
    restored = torch.load(Path(local) / "last.ckpt", weights_only=True)
    assert restored["global_step"] == 8
    metadata = (Path(local) / "metadata.yaml").read_text()
    assert "aliases:\n- last" in metadata and "monitor: train_loss" in metadata
    database = Path(sqlite_uri.removeprefix("sqlite:///"))
    assert list((database.parent / "artifacts").glob(f"**/{logger.run_id}/artifacts/checkpoints/last/last.ckpt"))
    assert list(elsewhere.iterdir()) == []  # nothing in the directory the run started from (MLflow's ./mlruns)


def test_checkpoints_stay_local_by_default(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("no-checkpoints", tracking_uri=sqlite_uri)
    trainer(tmp_path, logger, max_epochs=1).fit(Regressor(), loader())
    assert MlflowClient(sqlite_uri).list_artifacts(logger.run_id) == []
    assert list((tmp_path / "checkpoints").glob("*.ckpt"))


def test_a_resumed_fit_goes_on_logging_to_the_same_run(sqlite_uri: str, tmp_path: Path) -> None:
    first = MLFlowLogger("resume", tracking_uri=sqlite_uri)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, first, max_epochs=1, callbacks=[checkpoint]).fit(Regressor(), loader())
    client = MlflowClient(sqlite_uri)
    assert client.get_run(first.run_id).info.status == "FINISHED"

    second = MLFlowLogger("resume", tracking_uri=sqlite_uri, run_id=first.run_id)
    resumed = trainer(tmp_path, second, max_epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt")])
    resumed.fit(Regressor(), loader(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert second.run_id == first.run_id
    assert [step for step, _ in history(client, first.run_id, "train_loss")] == list(range(8))
    record = client.get_run(first.run_id)
    assert record.info.status == "FINISHED"
    assert record.data.params["lr"] == "0.05"  # logged again with the same value: accepted
    assert len(client.search_runs([record.info.experiment_id])) == 1


def test_a_failed_fit_marks_the_run_failed(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("failed", tracking_uri=sqlite_uri)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        trainer(tmp_path, logger).fit(Regressor(fail_at=2), loader())
    client = MlflowClient(sqlite_uri)
    assert client.get_run(logger.run_id).info.status == "FAILED"
    assert [step for step, _ in history(client, logger.run_id, "train_loss")] == [0, 1]


def test_resuming_a_run_that_does_not_exist_is_refused(sqlite_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger(tracking_uri=sqlite_uri, run_id="0123456789abcdef0123456789abcdef")
    with pytest.raises(MisconfigurationError, match=r"run_id='0123456789abcdef0123456789abcdef'\): no such run"):
        trainer(tmp_path, logger).fit(Regressor(), loader())


def test_log_model_takes_true_false_or_all() -> None:
    with pytest.raises(MisconfigurationError, match=r"log_model='best'\): give True, False or 'all'"):
        MLFlowLogger(log_model="best")  # type: ignore[arg-type]


def test_nothing_is_created_for_a_run_that_logged_nothing(tmp_path: Path) -> None:
    logger = MLFlowLogger(save_dir=tmp_path / "untouched")
    logger.finalize("success")
    assert not (tmp_path / "untouched").exists()


@pytest.mark.slow
def test_a_fit_against_an_mlflow_server_on_loopback(server_uri: str, tmp_path: Path) -> None:
    logger = MLFlowLogger("served", tracking_uri=server_uri, tags={"where": "loopback"}, log_model=True)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, logger, callbacks=[checkpoint]).fit(Regressor(optimizer=OPTIMIZER), loader())
    client = MlflowClient(server_uri)
    record = client.get_run(logger.run_id)
    assert record.info.status == "FINISHED"
    assert record.data.params["optimizer/momentum"] == "0.9"
    assert record.data.tags["where"] == "loopback"
    assert [step for step, _ in history(client, logger.run_id, "train_loss")] == list(range(8))
    local = client.download_artifacts(logger.run_id, "checkpoints/last", str(tmp_path / "down"))
    assert torch.load(Path(local) / "last.ckpt", weights_only=True)["global_step"] == 8
