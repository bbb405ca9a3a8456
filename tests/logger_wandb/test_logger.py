"""WandbLogger in W&B's offline mode: the run files it writes, read back with W&B's own record schema."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("wandb", reason="wandb is not installed (pip install -c constraints.txt wandb)")

from tests.logger_support import loader, trainer
from tests.logger_wandb.conftest import Regressor, read_run, run_files
from torchplug import MisconfigurationError
from torchplug.callbacks import ModelCheckpoint
from torchplug_wandb import WandbLogger

OPTIMIZER = {"name": "SGD", "momentum": 0.9}


def test_a_fit_writes_metrics_config_and_a_finished_run(tmp_path: Path) -> None:
    logger = WandbLogger(name="first", save_dir=tmp_path, project="fit", offline=True)
    run = trainer(tmp_path, logger)
    run.fit(Regressor(optimizer=OPTIMIZER), loader())
    (path,) = run_files(tmp_path)
    assert path.name == f"run-{logger.version}.wandb"
    recorded = read_run(path)
    assert (recorded.run_id, recorded.project, recorded.display_name) == (logger.version, "fit", "first")
    assert recorded.config["lr"] == 0.05
    assert recorded.config["optimizer"] == OPTIMIZER  # nested, as given
    losses = recorded.series("train_loss")
    assert [step for step, _ in losses] == list(range(8))
    assert math.isclose(losses[-1][1], float(run.logged_metrics["train_loss"]), rel_tol=1e-6)
    assert recorded.exit_code == 0
    assert (logger.name, logger.save_dir) == ("fit", str(tmp_path))


def test_by_name_the_run_is_under_default_root_dir(tmp_path: Path) -> None:
    run = trainer(tmp_path, ["csv", "wandb"], max_epochs=1)
    run.fit(Regressor(), loader())
    logger = run.loggers[1]
    assert isinstance(logger, WandbLogger)
    (path,) = run_files(tmp_path)  # offline: WANDB_MODE=offline, set by the conftest
    recorded = read_run(path)
    assert [step for step, _ in recorded.series("train_loss")] == [0, 1, 2, 3], recorded.history
    assert run.log_dir == run.loggers[0].log_dir


@pytest.mark.parametrize(("log_model", "count"), [(True, 2), ("all", 4)], ids=["at-the-end", "all"])
def test_checkpoints_are_recorded_as_model_artifacts(log_model: bool | str, count: int, tmp_path: Path) -> None:
    """One artifact version per checkpoint file written: at the end (the best and last), or as each is written."""
    torch.manual_seed(0)  # the second epoch's last loss is lower: a new best, so "all" records 4 files, not 3
    logger = WandbLogger(save_dir=tmp_path, offline=True, log_model=log_model)  # type: ignore[arg-type]
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="train_loss", save_top_k=1, save_last=True)
    trainer(tmp_path, logger, callbacks=[checkpoint]).fit(Regressor(), loader())
    artifacts = read_run(run_files(tmp_path)[0]).artifacts
    assert len(artifacts) == count
    assert {(a.name, a.type) for a in artifacts} == {(f"model-{logger.version}", "model")}
    assert all([entry.path for entry in a.manifest.contents] == ["model.ckpt"] for a in artifacts)
    final = {json.loads(a.metadata)["original_filename"]: sorted(a.aliases) for a in artifacts}
    assert final[Path(checkpoint.best_model_path).name] == ["best", "latest"]
    assert final["last.ckpt"] == ["latest"]
    assert json.loads(artifacts[-1].metadata)["monitor"] == "train_loss"


def test_nothing_is_logged_as_an_artifact_by_default(tmp_path: Path) -> None:
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    trainer(tmp_path, logger, max_epochs=1).fit(Regressor(), loader())
    assert read_run(run_files(tmp_path)[0]).artifacts == []


def test_a_failed_fit_finishes_the_run_with_exit_code_1(tmp_path: Path) -> None:
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        trainer(tmp_path, logger).fit(Regressor(fail_at=2), loader())
    recorded = read_run(run_files(tmp_path)[0])
    assert recorded.exit_code == 1
    assert [step for step, _ in recorded.series("train_loss")] == [0, 1]


def test_a_resumed_fit_logs_to_the_same_run_id(tmp_path: Path) -> None:
    first = WandbLogger(save_dir=tmp_path, offline=True)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, first, max_epochs=1, callbacks=[checkpoint]).fit(Regressor(), loader())
    second = WandbLogger(save_dir=tmp_path, offline=True, id=first.version)
    resumed = trainer(tmp_path, second, max_epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt")])
    resumed.fit(Regressor(), loader(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    runs = [read_run(path) for path in run_files(tmp_path)]
    assert {r.run_id for r in runs} == {first.version}
    steps = [step for r in runs for step, _ in r.series("train_loss")]
    assert sorted(steps) == list(range(8))  # offline, each part is a file of its own; `wandb sync` joins them


def test_the_logger_version_is_the_run_id_from_the_start(tmp_path: Path) -> None:
    logger = WandbLogger(save_dir=tmp_path, offline=True)
    before = logger.version
    logger.log_metrics({"x": 1.0}, 0)
    assert logger.experiment.id == before == logger.version
    logger.finalize("success")
    assert WandbLogger(save_dir=tmp_path, version="abc12345").version == "abc12345"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"log_model": "best"}, r"log_model='best'\): give True, False or 'all'"),
        ({"version": "a", "id": "b"}, r"both name the run id; give one of them"),
        ({"add_file_policy": "copy"}, r"add_file_policy='copy'\): give 'mutable' or 'immutable'"),
    ],
    ids=["log_model", "version-and-id", "add_file_policy"],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        WandbLogger(**kwargs)  # type: ignore[arg-type]


def test_lightnings_add_file_policy_is_taken_and_the_logged_bytes_never_change(tmp_path: Path) -> None:
    # "immutable" in Lightning uploads the file as it is at upload time; here the bytes are read when logged.
    logger = WandbLogger(save_dir=tmp_path, offline=True, log_model="all", add_file_policy="immutable")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=0, save_last=True)
    trainer(tmp_path, logger, callbacks=[checkpoint]).fit(Regressor(), loader())
    assert logger.add_file_policy == "immutable"
    artifacts = read_run(run_files(tmp_path)[0]).artifacts
    assert len(artifacts) == 2  # last.ckpt after each of the 2 epochs, each version its own bytes
    assert len({a.manifest.contents[0].digest for a in artifacts}) == 2
