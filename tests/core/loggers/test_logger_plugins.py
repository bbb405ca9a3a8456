"""Loggers are the sixth plugin kind: registered through a hook, chosen by name, listed, with install hints.

``Trainer(logger=...)`` takes what Lightning's takes (True, False, None, a Logger, a list) and registry
names besides: ``"csv"``, ``"tensorboard"``, ``["csv", "mlflow"]``.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.core.cli.test_trainer_cli import QUIET
from tests.core.cli.tiny import TinyData, TinyModel
from tests.core.conftest import MakeDist
from tests.core.test_cli_plugins import run_core
from torchplug import (
    BrokenPluginError,
    MisconfigurationError,
    PluginConflictError,
    PluginUnavailableError,
    Trainer,
    UnknownPluginError,
)
from torchplug._host import PluginHost, plugin_host
from torchplug.callbacks import ModelCheckpoint
from torchplug.cli import main
from torchplug.loggers import CSVLogger, Logger, TensorBoardLogger
from torchplug.trainer import logger_choice

#: A logger that keeps what it receives in memory, in a module of a test distribution.
MEMORY_LOGGER = """
    from torchplug.loggers import Logger

    class MemoryLogger(Logger):
        def __init__(self, save_dir=None, name="memory"):
            self._save_dir, self._name = save_dir, name
            self.metrics, self.params, self.checkpoints, self.status = [], {}, [], None

        @property
        def name(self):
            return self._name

        @property
        def version(self):
            return 0

        @property
        def save_dir(self):
            return self._save_dir

        def log_metrics(self, metrics, step):
            self.metrics.append((step, dict(metrics)))

        def log_hyperparams(self, params):
            self.params.update(params)

        def after_save_checkpoint(self, checkpoint_callback):
            self.checkpoints.append(checkpoint_callback.last_model_path or checkpoint_callback.best_model_path)

        def finalize(self, status):
            self.status = status
"""

REGISTERS_MEMORY = """
    from torchplug import hookimpl

    @hookimpl
    def torchplug_register_loggers(registry):
        registry.register("memory", "PREFIX_loggers:MemoryLogger", description="in memory", name="from-registry")
"""


def install_memory(make_dist: MakeDist, distribution: str, name: str = "memory", version: str = "1.0") -> str:
    """Install ``distribution``, whose plugin registers the in-memory logger as ``name``; returns its module prefix."""
    plugin = REGISTERS_MEMORY.replace('"memory"', f'"{name}"')
    return make_dist(
        distribution,
        version=version,
        modules={"PREFIX_loggers": MEMORY_LOGGER, "PREFIX_plugin": plugin},
        entry_points={name: "PREFIX_plugin"},
    )


def fit(trainer: Trainer) -> TinyModel:
    model = TinyModel()
    trainer.fit(model, datamodule=TinyData())
    return model


def quiet(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    return {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "enable_progress_bar": False,
        "default_root_dir": str(tmp_path),
        **kwargs,
    }


# -- the kind -------------------------------------------------------------------------------------


def test_the_core_registers_csv_and_tensorboard_through_the_logger_hook() -> None:
    registry = plugin_host().registry("logger")
    assert {"csv", "tensorboard"} <= set(registry.names())
    for name, cls in (("csv", CSVLogger), ("tensorboard", TensorBoardLogger), ("tb", TensorBoardLogger)):
        entry = registry.resolve(name)
        assert entry.provider.builtin and entry.provider.distribution == "core"
        assert isinstance(entry.target, str)  # lazy: nothing imported to list it
        assert entry.load() is cls
    assert registry.base_class is Logger


def test_a_plugin_registers_a_logger_and_the_trainer_creates_it_by_name(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    install_memory(make_dist, "vendor-memory", version="2.0")
    host = new_host()
    entry = host.registry("logger").resolve("memory")
    assert (entry.provider.distribution, entry.provider.version) == ("vendor-memory", "2.0")
    assert not entry.is_loaded
    trainer = Trainer(**quiet(tmp_path, logger="memory", plugin_host=host, log_every_n_steps=1))
    (logger,) = trainer.loggers
    assert type(logger).__name__ == "MemoryLogger"
    assert logger.name == "from-registry"  # the registered init params
    assert logger.save_dir == str(tmp_path)  # Logger.for_trainer: save_dir is the Trainer's default_root_dir
    fit(trainer)
    assert logger.params == {"hidden": 8, "lr": 0.1, "n": 64, "batch_size": 16}
    assert [step for step, metrics in logger.metrics if "train_loss" in metrics] == [0, 1, 2, 3]
    assert logger.checkpoints == [str(tmp_path / "checkpoints" / "epoch=0-step=4.ckpt")]
    assert logger.status == "success"


def test_a_lightning_style_register_loggers_classmethod_is_a_plugin(
    make_dist: MakeDist, new_host: Callable[..., PluginHost]
) -> None:
    make_dist(
        "vendor-classy",
        modules={
            "PREFIX_loggers": MEMORY_LOGGER
            + """
    class Registrar:
        @classmethod
        def register_loggers(cls, logger_registry):
            logger_registry.register("classy", f"{__name__}:MemoryLogger", description="class-method style")
"""
        },
        entry_points={"classy": "PREFIX_loggers:Registrar"},
    )
    entry = new_host().registry("logger").resolve("classy")
    assert entry.description == "class-method style"
    assert entry.provider.distribution == "vendor-classy"


def test_two_distributions_claiming_one_logger_name_is_a_conflict_until_one_is_picked(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    for distribution in ("vendor-a", "vendor-b"):
        install_memory(make_dist, distribution)
    host = new_host()
    with pytest.raises(PluginConflictError, match=r"'memory' is provided by 2 distributions.*memory@vendor-a"):
        Trainer(**quiet(tmp_path, logger="memory", plugin_host=host))
    trainer = Trainer(**quiet(tmp_path, logger="memory@vendor-b", plugin_host=host))
    assert type(trainer.logger).__module__.startswith("tp_test_vendor_b")
    preferred = new_host(prefer={"memory": "vendor-a"})
    assert type(Trainer(**quiet(tmp_path, logger="memory", plugin_host=preferred)).logger).__module__.startswith(
        "tp_test_vendor_a"
    )


def test_a_third_party_logger_cannot_take_a_builtin_name(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    install_memory(make_dist, "vendor-csv", name="csv")
    trainer = Trainer(**quiet(tmp_path, logger="csv", plugin_host=new_host()))
    assert type(trainer.logger) is CSVLogger  # the core's built-in keeps its name; theirs is csv@vendor-csv


def test_a_broken_logger_plugin_names_its_distribution(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    make_dist(
        "vendor-broken-logger",
        modules={"PREFIX_plugin": REGISTERS_MEMORY.replace("PREFIX_loggers:MemoryLogger", "tp_no_such_module:Nope")},
        entry_points={"broken": "PREFIX_plugin"},
    )
    with pytest.raises(BrokenPluginError, match=r"Logger 'memory' from vendor-broken-logger 1\.0 is broken"):
        Trainer(**quiet(tmp_path, logger="memory", plugin_host=new_host()))


def test_an_unknown_logger_name_says_which_package_to_install(
    new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    host = new_host(autoload=False)  # only the core: as on a machine without the logger packages
    with pytest.raises(UnknownPluginError, match=r"Unknown logger 'mlflow'\. .*Hint: pip install logger-mlflow"):
        Trainer(**quiet(tmp_path, logger="mlflow", plugin_host=host))
    with pytest.raises(UnknownPluginError, match=r"Unknown logger 'wandb'\. .*Hint: pip install logger-wandb"):
        Trainer(**quiet(tmp_path, logger=["csv", "wandb"], plugin_host=host))
    with pytest.raises(UnknownPluginError, match=r"Did you mean 'csv'\?"):
        Trainer(**quiet(tmp_path, logger="cvs", plugin_host=host))


def test_a_logger_whose_library_is_missing_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what Python does for a package that is not installed
    with pytest.raises(PluginUnavailableError, match=r"logger='tensorboard' .*tensorboard is not installed\. Hint"):
        Trainer(**quiet(tmp_path, logger="tensorboard", plugin_host=new_host()))


# -- Trainer(logger=...) --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, True], ids=["None", "True"])
def test_the_default_logger_is_tensorboard_when_it_is_installed(value: Any, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    trainer = Trainer(**quiet(tmp_path, logger=value))
    (logger,) = trainer.loggers
    assert isinstance(logger, TensorBoardLogger)
    assert logger.log_dir == f"{tmp_path}/torchplug_logs/version_0"


def test_without_tensorboard_the_default_logger_is_csv_and_that_is_announced_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setattr(logger_choice, "_announced_fallback", False)
    with pytest.warns(UserWarning, match=r"default logger is CSVLogger because tensorboard is not installed"):
        trainer = Trainer(**quiet(tmp_path))
    assert isinstance(trainer.logger, CSVLogger)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(Trainer(**quiet(tmp_path, logger=True)).logger, CSVLogger)  # said once per process
        assert isinstance(Trainer(**quiet(tmp_path, logger="csv")).logger, CSVLogger)  # chosen: nothing to say


def test_names_and_instances_mix_in_the_order_given(tmp_path: Path) -> None:
    mine = CSVLogger(tmp_path / "mine", name="exp")
    trainer = Trainer(**quiet(tmp_path, logger=["tensorboard", mine, "csv"]))
    assert [type(logger) for logger in trainer.loggers] == [TensorBoardLogger, CSVLogger, CSVLogger]
    assert trainer.loggers[1] is mine
    assert trainer.loggers[2].log_dir == f"{tmp_path}/torchplug_logs/version_0"
    assert trainer.log_dir == trainer.loggers[0].log_dir  # the first logger's, as Lightning
    assert Trainer(**quiet(tmp_path, logger=False)).loggers == []
    assert Trainer(**quiet(tmp_path, logger=mine)).loggers == [mine]
    assert Trainer(**quiet(tmp_path, logger=("csv",))).loggers[0].name == "torchplug_logs"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, r"logger=3 is not a logger\. Give True"),
        ({"csv": "csv"}, r"logger=\{'csv': 'csv'\} is not a logger"),
        (["csv", 3.5], r"logger= holds 3\.5, which is not a torchplug Logger"),
        (["csv", "CSV"], r"logger= names 'csv' more than once"),
    ],
    ids=["int", "dict", "float-in-list", "name-twice"],
)
def test_bad_logger_values_are_refused_naming_them(value: Any, message: str, tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        Trainer(**quiet(tmp_path, logger=value))


def test_one_logger_object_listed_twice_is_refused(tmp_path: Path) -> None:
    from torchplug.loggers.csv_logs import CSVLogger

    logger = CSVLogger(str(tmp_path))
    with pytest.raises(MisconfigurationError, match=r"logger= holds the same CSVLogger object twice"):
        Trainer(**quiet(tmp_path, logger=[logger, logger]))


def test_every_logger_hears_of_each_checkpoint_on_rank_zero(
    make_dist: MakeDist, new_host: Callable[..., PluginHost], tmp_path: Path
) -> None:
    install_memory(make_dist, "vendor-memory")
    checkpoint = ModelCheckpoint(save_last=True, every_n_train_steps=2)
    trainer = Trainer(**quiet(tmp_path, logger="memory", plugin_host=new_host(), callbacks=[checkpoint]))
    fit(trainer)
    assert trainer.logger.checkpoints.count(str(tmp_path / "checkpoints" / "last.ckpt")) >= 2


# -- the command line -----------------------------------------------------------------------------


def test_core_plugins_list_kind_logger() -> None:
    result = run_core("plugins", "list", "--kind", "loggers", "--json")
    assert result.returncode == 0, result.stderr
    entries = {e["name"]: e for e in json.loads(result.stdout)["entries"]}
    assert {e["kind"] for e in entries.values()} == {"logger"}
    assert {"csv", "tensorboard"} <= set(entries)
    assert entries["tensorboard"]["aliases"] == ["tb"]
    table = run_core("plugins", "list", "--kind", "logger").stdout.splitlines()
    rows = {row.split()[0]: row.split()[1:4] for row in table[1:] if row and not row.startswith(" ")}
    assert rows["csv"] == ["logger", "-", "core==0.1.0"]
    assert rows["tensorboard"] == ["logger", "tb", "core==0.1.0"]


def core(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the ``core`` command in this process: its exit code and stderr."""
    code = main(list(args))
    return code, capsys.readouterr().err


def test_trainer_logger_on_the_command_line_takes_registry_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model, data = f"--model={TinyModel.__module__}.TinyModel", f"--data={TinyData.__module__}.TinyData"
    args = ("fit", model, data, f"--trainer.default_root_dir={tmp_path}", *QUIET)
    code, err = core(capsys, *args, "--trainer.max_epochs=1", "--trainer.logger=[csv,tensorboard]")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "torchplug_logs").iterdir()) == ["version_0"]
    assert (tmp_path / "torchplug_logs" / "version_0" / "metrics.csv").is_file()
    assert list((tmp_path / "torchplug_logs" / "version_0").glob("events.out.tfevents.*"))
    code, err = core(capsys, *args, "--trainer.logger=mlfow")
    assert code == 2
    assert "--trainer.logger=mlfow: Unknown logger 'mlfow'." in err
