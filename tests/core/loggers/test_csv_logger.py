"""CSVLogger after a real fit: the columns of ``metrics.csv`` and the values in ``hparams.yaml``."""

from __future__ import annotations

import csv

import yaml

from torchplug.loggers.csv_logs import CSVLogger


def test_metrics_csv_has_step_and_epoch_columns(tmp_path, fit_with):
    logger = CSVLogger(tmp_path, name="exp")
    fit_with(logger, enable_checkpointing=False)

    assert logger.log_dir == f"{tmp_path}/exp/version_0"
    with open(logger.metrics_file, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert set(rows[0]) == {"step", "epoch", "train_loss_step", "train_loss_epoch", "val_loss"}
    step_rows = [r for r in rows if r["train_loss_step"]]
    # Lightning's logger steps: the count of batches that stepped before this one, logged every
    # log_every_n_steps=2 batches; the epoch's values at the step of its last batch
    assert [int(r["step"]) for r in step_rows] == [1, 3, 5, 7, 9, 11, 13, 15]
    epoch_rows = [r for r in rows if r["train_loss_epoch"]]
    assert [(int(r["step"]), float(r["epoch"])) for r in epoch_rows] == [(7, 0.0), (15, 1.0)]
    assert len([r for r in rows if r["val_loss"]]) == 2


def test_hparams_yaml_holds_the_saved_hyperparameters(tmp_path, fit_with):
    logger = CSVLogger(tmp_path)
    fit_with(logger, enable_checkpointing=False)

    with open(f"{logger.log_dir}/hparams.yaml") as stream:
        assert yaml.safe_load(stream) == {"lr": 0.01, "hidden": 4, "name": "regression"}


def test_each_run_gets_the_next_version(tmp_path, fit_with):
    first, second = CSVLogger(tmp_path), CSVLogger(tmp_path)
    fit_with(first, enable_checkpointing=False, max_epochs=1)
    fit_with(second, enable_checkpointing=False, max_epochs=1)
    assert (first.version, second.version) == (0, 1)
