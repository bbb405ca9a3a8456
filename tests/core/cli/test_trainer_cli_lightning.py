"""TrainerCLI with LightningCLI's options: save_config_kwargs, callbacks in trainer_defaults, lazy_instance,
config.yaml with run=False, and ``parser.add_lightning_class_args`` in ``add_arguments_to_parser``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonargparse import lazy_instance

from tests.core.cli.tiny import TinyData, TinyModel
from torchplug import MisconfigurationError
from torchplug.callbacks.early_stopping import EarlyStopping
from torchplug.cli import TrainerCLI
from torchplug.loggers.csv_logs import CSVLogger


def args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.max_epochs=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *extra,
    ]


def test_run_false_writes_the_config_when_the_first_run_starts(tmp_path):
    cli = TrainerCLI(TinyModel, TinyData, args=args(tmp_path), run=False)
    assert not list(tmp_path.rglob("config.yaml"))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    (saved,) = tmp_path.rglob("config.yaml")
    assert yaml.safe_load(saved.read_text())["trainer"]["max_epochs"] == 1


def test_save_config_kwargs_names_the_file_and_refuses_to_overwrite_unless_asked(tmp_path):
    cli = TrainerCLI(
        TinyModel, TinyData, args=args(tmp_path), run=False, save_config_kwargs={"config_filename": "c.yaml"}
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    (saved,) = tmp_path.rglob("c.yaml")
    log_dir = f"--trainer.logger.init_args.save_dir={tmp_path}"
    again = args(tmp_path, "--trainer.logger=CSVLogger", log_dir, "--trainer.logger.init_args.version=0")
    cli = TrainerCLI(TinyModel, TinyData, args=again, run=False, save_config_kwargs={"config_filename": "c.yaml"})
    with pytest.raises(MisconfigurationError, match=r"c\.yaml exists already"):
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli = TrainerCLI(TinyModel, TinyData, args=again, run=False,
                     save_config_kwargs={"config_filename": "c.yaml", "overwrite": True})  # fmt: skip
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert saved.exists()


def test_unknown_save_config_kwargs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown key"):
        TrainerCLI(TinyModel, TinyData, args=args(tmp_path), run=False, save_config_kwargs={"file": "x"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overwrite": "no"}, "save_config_kwargs={'overwrite': 'no'}) is not valid: 'overwrite' takes True or False."),
        (
            {"config_filename": ""},
            "save_config_kwargs={'config_filename': ''}) is not valid: 'config_filename' takes a",
        ),
        (
            {"config_filename": None},
            "'config_filename' takes a file name. Hint: save_config_kwargs={'config_filename':",
        ),
    ],
    ids=["overwrite-string", "empty-filename", "no-filename"],
)
def test_save_config_kwargs_of_the_wrong_type_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):  # "no" was a true value: the file was overwritten
        TrainerCLI(TinyModel, TinyData, args=args(tmp_path), run=False, save_config_kwargs=kwargs)


def test_an_unknown_trainer_default_is_refused_naming_it(tmp_path):
    with pytest.raises(
        ValueError, match=re.escape("'max_epoch' is not an argument of Trainer. Did you mean 'max_epochs'?")
    ):
        TrainerCLI(TinyModel, TinyData, args=args(tmp_path), run=False, trainer_defaults={"max_epoch": 3})


def test_callback_instances_in_trainer_defaults_join_the_configured_ones(tmp_path):
    stopping = EarlyStopping("val_loss", patience=7)
    cli = TrainerCLI(
        TinyModel,
        TinyData,
        args=args(tmp_path, "--trainer.callbacks+=LearningRateMonitor"),
        run=False,
        trainer_defaults={"callbacks": [stopping]},
    )
    names = [type(c).__name__ for c in cli.trainer.callbacks]
    assert stopping in cli.trainer.callbacks and "LearningRateMonitor" in names


def test_lazy_instance_in_trainer_defaults(tmp_path):
    cli = TrainerCLI(
        TinyModel,
        TinyData,
        args=args(tmp_path),
        run=False,
        trainer_defaults={"logger": lazy_instance(CSVLogger, save_dir=str(tmp_path / "lazy"))},
    )
    assert isinstance(cli.trainer.logger, CSVLogger)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert list((tmp_path / "lazy").rglob("config.yaml"))


class WithEarlyStopping(TrainerCLI):
    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults(
            {"early_stopping.monitor": "val_acc", "early_stopping.mode": "max", "early_stopping.patience": 3}
        )


def test_add_lightning_class_args_adds_a_configured_callback(tmp_path):
    cli = WithEarlyStopping(TinyModel, TinyData, args=args(tmp_path, "--early_stopping.patience=9"), run=False)
    (stopping,) = [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    assert stopping.monitor == "val_acc" and stopping.patience == 9


def test_add_lightning_class_args_through_a_subcommand(tmp_path):
    WithEarlyStopping(TinyModel, TinyData, args=["fit", *args(tmp_path)])
    (saved,) = tmp_path.rglob("config.yaml")
    assert yaml.safe_load(saved.read_text())["early_stopping"]["patience"] == 3
