"""``core fit|validate|test|predict`` and ``TrainerCLI``: configs, overrides, seeds, errors and exit codes."""

from __future__ import annotations

import csv
import inspect
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from tests.core.cli.conftest import CORE_SCRIPT, TINY, Core, CoreProcess, needs_core_script
from tests.core.cli.tiny import TinyData, TinyModel
from torchplug import Trainer
from torchplug.cli import TrainerCLI

QUIET = ("--trainer.enable_progress_bar=false",)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A complete config of a two-epoch run of the tiny model, logging under ``tmp_path``."""
    return write(
        tmp_path / "config.yaml",
        f"""
        seed_everything: 7
        trainer:
          max_epochs: 2
          default_root_dir: {tmp_path}
          enable_progress_bar: false
          logger: csv
        model:
          class_path: {TINY}.TinyModel
          init_args:
            hidden: 16
        data:
          class_path: {TINY}.TinyData
    """,
    )


def metrics(root: Path) -> list[dict[str, str]]:
    (path,) = root.glob("torchplug_logs/version_*/metrics.csv")
    with path.open() as file:
        return list(csv.DictReader(file))


# -- configs ------------------------------------------------------------------------------------


def test_fit_with_a_config_file_trains_and_saves_the_config(core: Core, config: Path, tmp_path: Path) -> None:
    result = core("fit", "--config", str(config))
    assert result.code == 0, result
    assert "fit: 2 epoch(s), 8 step(s)" in result.out
    assert "fit: best checkpoint" in result.out
    assert {row["epoch"] for row in metrics(tmp_path) if row.get("val_acc")} == {"0.0", "1.0"}
    (saved,) = tmp_path.glob("torchplug_logs/version_0/config.yaml")
    data = yaml.safe_load(saved.read_text())
    assert data["model"]["init_args"]["hidden"] == 16
    assert data["seed_everything"] == 7


def test_later_config_files_and_options_override_earlier_ones(core: Core, config: Path, tmp_path: Path) -> None:
    second = write(
        tmp_path / "second.yaml",
        """
        trainer:
          max_epochs: 5
        model:
          init_args:
            hidden: 3
    """,
    )
    result = core("fit", "--config", str(config), "--config", str(second), "--model.lr=0.5", "--print_config")
    assert result.code == 0, result
    data = yaml.safe_load(result.out)
    assert data["trainer"]["max_epochs"] == 5
    assert data["model"]["init_args"] == {"hidden": 3, "lr": 0.5}
    assert data["data"]["class_path"] == f"{TINY}.TinyData"


class WideModel(TinyModel):
    """A model whose arguments differ from TinyModel's."""

    def __init__(self, width: int = 4) -> None:
        super().__init__(hidden=width)


def test_init_args_a_later_class_path_drops_are_warned_about(core: Core, config: Path) -> None:
    wide = "tests.core.cli.test_trainer_cli.WideModel"
    with pytest.warns(UserWarning, match="was dropped: --model chose") as warned:
        result = core("fit", "--config", str(config), "--model.lr=0.5", f"--model={wide}", "--print_config")
    assert result.code == 0, result
    assert yaml.safe_load(result.out)["model"] == {"class_path": wide, "init_args": {"width": 4}}
    assert [str(w.message) for w in warned] == [
        f"model.init_args.hidden (from {config}) was dropped: --model chose {wide}, which takes no argument "
        f"'hidden', in place of {TINY}.TinyModel (from {config}).",
        f"model.init_args.lr (from --model.lr) was dropped: --model chose {wide}, which takes no argument 'lr', in "
        f"place of {TINY}.TinyModel (from {config}).",
    ]


def test_a_later_class_path_that_takes_the_same_arguments_is_not_warned_about(core: Core, config: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = core("fit", "--config", str(config), f"--model={TINY}.BuggyModel", "--print_config")
    assert result.code == 0, result
    assert yaml.safe_load(result.out)["model"]["init_args"]["hidden"] == 16


def test_print_config_output_is_a_config_that_prints_the_same(core: Core, config: Path, tmp_path: Path) -> None:
    first = core("fit", "--config", str(config), "--trainer.accelerator=cpu", "--print_config")
    assert first.code == 0, first
    data = yaml.safe_load(first.out)
    assert set(inspect.signature(Trainer).parameters) - {"plugin_host"} == set(data["trainer"])
    printed = write(tmp_path / "printed.yaml", first.out)
    second = core("fit", "--config", str(printed), "--print_config")
    assert second.out == first.out


def test_print_config_then_fit_from_it(core: Core, config: Path, tmp_path: Path) -> None:
    printed = write(tmp_path / "printed.yaml", core("fit", "--config", str(config), "--print_config").out)
    result = core("fit", "--config", str(printed), "--trainer.max_epochs=1")
    assert result.code == 0, result
    assert "fit: 1 epoch(s)" in result.out


def test_model_and_data_given_as_options(core: Core, tmp_path: Path) -> None:
    result = core(
        "fit",
        f"--model={TINY}.TinyModel",
        "--model.hidden=4",
        f"--data.class_path={TINY}.TinyData",
        "--data.init_args.batch_size=32",
        "--trainer.max_steps=3",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={tmp_path}",
        *QUIET,
    )
    assert result.code == 0, result
    assert "3 step(s)" in result.out


def test_every_trainer_argument_is_an_option(core: Core) -> None:
    result = core("fit", "--help")
    assert result.code == 0
    for name in inspect.signature(Trainer).parameters:
        assert (f"--trainer.{name} " in result.out) is (name != "plugin_host"), name
    assert "exit codes:" in result.out
    assert "Installed: " in result.out  # registry names are listed live, not as fixed choices


def test_validate_test_and_predict_from_a_checkpoint(core: Core, config: Path, tmp_path: Path) -> None:
    assert core("fit", "--config", str(config)).code == 0
    (checkpoint,) = tmp_path.glob("torchplug_logs/version_0/checkpoints/epoch=*.ckpt")
    for command in ("validate", "test", "predict"):
        result = core(command, "--config", str(config), f"--ckpt_path={checkpoint}")
        assert result.code == 0, result
    assert "test_acc" in core("test", "--config", str(config), f"--ckpt_path={checkpoint}").out
    assert "predict: 1 batch(es)" in core("predict", "--config", str(config)).out


# -- seeds --------------------------------------------------------------------------------------


def weights(*args: str) -> torch.Tensor:
    cli = TrainerCLI(args=[f"--model={TINY}.TinyModel", "--trainer.logger=false", *args], run=False)
    assert cli.model is not None
    return torch.cat([p.detach().flatten() for p in cli.model.parameters()])


def test_seed_everything_with_an_int_makes_the_model_reproducible() -> None:
    assert torch.equal(weights("--seed_everything=3"), weights("--seed_everything=3"))
    assert not torch.equal(weights("--seed_everything=3"), weights("--seed_everything=4"))


def test_seed_everything_true_picks_a_seed_and_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = TrainerCLI(args=[f"--model={TINY}.TinyModel", "--seed_everything=true"], run=False)
    assert isinstance(cli.seed, int)
    assert cli.config.seed_everything == cli.seed
    # A re-launched DDP rank gets the exported seed, so every rank builds the same model.
    monkeypatch.setenv("TORCHPLUG_GLOBAL_SEED", "11")
    assert torch.equal(weights("--seed_everything=true"), weights("--seed_everything=11"))


def test_seed_everything_false_does_not_seed() -> None:
    cli = TrainerCLI(args=[f"--model={TINY}.TinyModel", "--seed_everything=false"], run=False)
    assert cli.seed is None


# -- --resolve ----------------------------------------------------------------------------------


def test_resolve_prints_the_decision_trace_and_does_not_train(core: Core, tmp_path: Path) -> None:
    result = core(
        "fit",
        "--resolve",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--trainer.precision=bf16",
        f"--trainer.default_root_dir={tmp_path}",
    )
    assert result.code == 0, result
    lines = {line.split()[0]: line for line in result.out.splitlines()}
    assert lines["accelerator"].split()[1] == "cpu"
    assert lines["strategy"].split()[1] == "ddp"
    assert "strategy='ddp'" in lines["strategy"]
    assert lines["precision"].split()[1] == "bf16-mixed"
    assert lines["cluster_environment"].split()[1] == "local"
    assert not list(tmp_path.iterdir())


def test_resolve_with_a_model_leaves_it_out(core: Core, config: Path, tmp_path: Path) -> None:
    result = core("fit", "--config", str(config), f"--model={TINY}.BuggyModel", "--resolve")
    assert result.code == 0, result
    assert "single_device" in result.out
    assert not list(tmp_path.glob("torchplug_logs"))


# -- bad input: exit code 2, the option named, the choices listed, no traceback -------------------

BAD_INPUT = {
    "unknown-accelerator": (
        ["--trainer.accelerator=cpuu"],
        ["--trainer.accelerator=cpuu", "Unknown accelerator 'cpuu'", "Did you mean 'cpu'", "Installed: cpu"],
    ),
    "unknown-strategy": (["--trainer.strategy=dpp"], ["--trainer.strategy=dpp", "Did you mean 'ddp'", "Installed:"]),
    "unknown-precision": (["--trainer.precision=bf61-mixed"], ["--trainer.precision", "Installed:", "bf16-mixed"]),
    "unknown-plugin": (["--trainer.plugins=[asyncc]"], ["--trainer.plugins=asyncc", "Did you mean 'async'"]),
    "bad-devices": (["--trainer.devices=zero"], ["--trainer.devices", "devices='zero' is not valid", "positive int"]),
    "no-devices": (["--trainer.devices=0"], ["--trainer.devices", "devices=0 selects no device"]),
    "conflicting-arguments": (
        ["--trainer.strategy=single_device", "--trainer.devices=2"],
        ["--trainer.strategy", "Hint: use strategy='ddp'"],
    ),
    "bad-loop-argument": (["--trainer.max_epochs=-3"], ["--trainer.max_epochs", "int >= 0"]),
    "missing-class": ([f"--model={TINY}.Missing"], [f"--model={TINY}.Missing", "torchplug.Module subclass"]),
    "missing-module": (["--model=nope.Missing"], ["--model=nope.Missing", "No module named 'nope'"]),
    "not-a-module": (["--model=torch.nn.Linear"], ["--model=torch.nn.Linear", "not a subclass of Module"]),
    "missing-data-class": (["--data=nope.Data"], ["--data=nope.Data", "torchplug.DataModule subclass"]),
    "bad-init-arg": (["--model.hidden=wide"], ["--model.hidden", "wide"]),
    "unknown-option": (
        ["--trainer.max_epoch=3"],
        ["unrecognized arguments: --trainer.max_epoch=3", "Did you mean '--trainer.max_epochs'"],
    ),
    "unknown-init-arg": (
        ["--model.hiden=3"],
        ["--model.hiden: TinyModel takes no argument 'hiden'", "Did you mean 'hidden'", "Its arguments: hidden, lr"],
    ),
    "unknown-callback-arg": (
        ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitr=x"],
        ["--trainer.callbacks.monitr: EarlyStopping takes no argument 'monitr'. Did you mean 'monitor'?"],
    ),
    "unknown-logger-arg": (
        ["--trainer.logger=CSVLogger", "--trainer.logger.init_args.save_dirr=x"],
        ["--trainer.logger.init_args.save_dirr: CSVLogger takes no argument 'save_dirr'. Did you mean 'save_dir'?"],
    ),
    "float-for-an-int": (["--trainer.max_epochs=1.5"], ["--trainer.max_epochs=1.5: expected an int or null.\n"]),
    "float-for-a-seed": (["--seed_everything=1.5"], ["--seed_everything=1.5: expected true or false or an int.\n"]),
    "unknown-callback-class": (
        ["--trainer.callbacks+=EarlyStoping"],
        [
            "--trainer.callbacks=EarlyStoping: no Callback class is called 'EarlyStoping'. Did you mean "
            "'EarlyStopping'? Hint: give its class path (package.module.Class)"
        ],
    ),
    "missing-callback-path": (
        ["--trainer.callbacks=torchplug.callbacks.EarlyStoping"],
        [
            "--trainer.callbacks=torchplug.callbacks.EarlyStoping: cannot import it: module 'torchplug.callbacks' has "
            "no attribute 'EarlyStoping'. Give the dotted path of a torchplug.Callback subclass"
        ],
    ),
    "callback-without-its-required-argument": (
        ["--trainer.callbacks+=EarlyStopping"],
        [
            "--trainer.callbacks=EarlyStopping: EarlyStopping() needs monitor, which has no default. Hint: give it "
            "after the class, --trainer.callbacks.monitor=VALUE"
        ],
    ),
    "option-typo": (["--trainer.acclerator=cpu"], ["--trainer.acclerator: Did you mean '--trainer.accelerator'?\n"]),
    "unknown-data-arg": (["--data.init_args.batch_sise=3"], ["--data.init_args.batch_sise", "'batch_size'"]),
    "negative-devices": (["--trainer.devices=-3"], ["--trainer.devices", "devices=-3 is not valid"]),
    "bad-seed": (["--seed_everything=-1"], ["--seed_everything", "between 0 and 2**32 - 1"]),
    "missing-config": (["--config", "missing.yaml"], ["--config", "missing.yaml", "does not exist"]),
    "config-is-a-folder": (["--config", "/"], ["--config", "not a file"]),
}


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_a_usage_error(core: Core, config: Path, args: list[str], expected: list[str]) -> None:
    result = core("fit", "--config", str(config), *args)
    assert result.code == 2, result
    assert result.err.startswith("core fit: error: "), result
    for text in expected:
        assert text in result.err, result
    assert "Traceback" not in result.err


def test_missing_model_is_a_usage_error(core: Core) -> None:
    result = core("fit", "--trainer.max_epochs=1")
    assert result.code == 2
    assert "--model is required" in result.err


def test_misconfiguration_found_while_running_is_a_usage_error(core: Core, tmp_path: Path) -> None:
    result = core(
        "fit", f"--model={TINY}.TinyModel", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}", *QUIET
    )  # no --data: nothing to train on
    assert result.code == 2, result
    assert "fit() needs training data" in result.err


@pytest.mark.parametrize(
    "text", ["trainer: [max_epochs", "trainer:\n\tmax_epochs: 1\n", "a: b: c"], ids=["bracket", "tab", "colon"]
)
def test_invalid_yaml_config_is_a_usage_error(core: Core, tmp_path: Path, text: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    result = core("fit", "--config", str(path))
    assert result.code == 2, result
    assert f"--config {path}: cannot read this file as YAML" in result.err
    assert "line" in result.err


BAD_CONFIGS = {
    "not-a-mapping": ("- trainer\n- model\n", ["expected a mapping of options", "got a list"]),
    "duplicate-key": (
        "trainer:\n  max_epochs: 1\n  accelerator: cpu\n  max_epochs: 2\n",
        ["bad.yaml: the key 'max_epochs' is given twice in one mapping (line 2 and line 4)"],
    ),
    "duplicate-section": (
        "trainer:\n  max_epochs: 1\nmodel:\n  hidden: 3\ntrainer:\n  max_epochs: 2\n",
        ["the key 'trainer' is given twice in one mapping (line 1 and line 5)"],
    ),
    "trainer-section-is-a-list": (
        "trainer: [1, 2]\n",
        ["bad.yaml: the 'trainer' section holds [1, 2] (list), not a mapping of options. Hint:"],
    ),
    "trainer-section-is-a-number": ("trainer: 3\n", ["the 'trainer' section holds 3 (int), not a mapping"]),
    "unknown-option": (
        "trainer:\n  max_epoch: 3\n",
        ["trainer.max_epoch (in a config file): no such option", "Did you mean '--trainer.max_epochs'"],
    ),
    "unknown-init-arg": (
        f"model:\n  class_path: {TINY}.TinyModel\n  init_args:\n    hiden: 3\n",
        ["model.init_args.hiden (in a config file): TinyModel takes no argument 'hiden'", "Did you mean 'hidden'"],
    ),
    "bad-value": ("trainer:\n  max_epochs: many\n", ["--trainer.max_epochs", "many"]),
    "option-at-the-top-level": (
        "max_epochs: 3\n",
        [
            "max_epochs (in a config file): no such option. Did you mean '--trainer.max_epochs'? Hint: options go "
            "under their section (trainer:, model:, data:), not at the top."
        ],
    ),
    "misspelt-section": (
        "trainers:\n  max_epochs: 3\n",
        ["trainers.max_epochs (in a config file): no such option. Did you mean '--trainer.max_epochs'"],
    ),
    "misspelt-section-of-a-class": (
        "modle:\n  hidden: 3\n",
        ["modle.hidden (in a config file): no such option. Did you mean '--model.hidden'?"],
    ),
    "unknown-callback-arg": (
        "trainer:\n  callbacks:\n    - class_path: EarlyStopping\n      init_args:\n        monitr: val_acc\n",
        [
            "trainer.callbacks[0].init_args.monitr (in a config file): EarlyStopping takes no argument 'monitr'. "
            "Did you mean 'monitor'?"
        ],
    ),
    "unknown-logger-arg": (
        "trainer:\n  logger:\n    class_path: CSVLogger\n    init_args:\n      save_dirr: logs\n",
        ["trainer.logger.init_args.save_dirr (in a config file): CSVLogger takes no argument 'save_dirr'."],
    ),
    "callback-init-raises": (
        "trainer:\n  callbacks:\n    - class_path: EarlyStopping\n      init_args:\n        monitor: val_acc\n"
        "        patience: -3\n",
        [
            "--trainer.callbacks=torchplug.callbacks.EarlyStopping: EarlyStopping.__init__ raised "
            "MisconfigurationError: EarlyStopping(patience=-3) is not valid: give an int >= 0"
        ],
    ),
}


@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_a_config_file_with_bad_content_is_a_usage_error(
    core: Core, tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path / "bad.yaml", text)
    result = core("fit", f"--model={TINY}.TinyModel", "--config", str(path))
    assert result.code == 2, result
    assert result.err.startswith("core fit: error: "), result
    for fragment in expected:
        assert fragment in result.err, result
    assert "Traceback" not in result.err


def test_an_init_argument_before_its_class_path_says_so(core: Core) -> None:
    result = core("fit", "--model.lr=0.5", f"--model={TINY}.TinyModel")
    assert result.code == 2, result
    assert result.err.startswith(
        f"core fit: error: --model.lr: given before --model={TINY}.TinyModel, which chooses the class, so no class "
        f"took it. Hint: give --model={TINY}.TinyModel first, then --model.lr.\n"
    ), result  # it said "TinyModel takes no argument 'lr'. Did you mean 'lr'?"


@needs_core_script
def test_the_core_script_names_the_subcommand_in_errors(core_process: CoreProcess) -> None:
    result = core_process("fit", f"--model={TINY}.TinyModel", "--model.hiden=3", program=(str(CORE_SCRIPT),))
    assert result.code == 2, result
    assert result.err.startswith("core fit: error: --model.hiden: TinyModel takes no argument 'hiden'"), result
    assert result.err.rstrip().endswith("See: core fit --help")


def test_errors_of_a_real_process_have_no_traceback(core_process: CoreProcess, tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.yaml", "trainer: [")
    for args in (
        ["fit", "--trainer.accelerator=cpuu", f"--model={TINY}.TinyModel"],
        ["fit", "--config", str(broken)],
        ["test", "--model=nope.Missing"],
    ):
        result = core_process(*args)
        assert result.code == 2, result
        assert "Traceback" not in result.err, result
        assert "error: " in result.err


def test_an_error_while_training_keeps_its_traceback_and_exits_1(core_process: CoreProcess, tmp_path: Path) -> None:
    result = core_process(
        "fit",
        f"--model={TINY}.BuggyModel",
        f"--data={TINY}.TinyData",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={tmp_path}",
        *QUIET,
    )
    assert result.code == 1, result
    assert "Traceback (most recent call last)" in result.err
    assert "RuntimeError: bug in training_step" in result.err


# -- TrainerCLI in a user's script ----------------------------------------------------------------

SCRIPT = """
    from torchplug.cli import TrainerCLI
    from tests.core.cli.tiny import TinyData, TinyModel

    if __name__ == "__main__":
        TrainerCLI(TinyModel, TinyData, trainer_defaults={"max_epochs": 1, "enable_progress_bar": False})
"""


def test_trainer_cli_gives_a_script_the_subcommands(core_process: CoreProcess, tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", SCRIPT)
    help_text = core_process("--help", program=(str(script),), cwd=tmp_path)
    assert help_text.code == 0
    for command in ("fit", "validate", "test", "predict"):
        assert command in help_text.out
    fit = core_process(
        "fit", "--model.hidden=4", f"--trainer.default_root_dir={tmp_path}", program=(str(script),), cwd=tmp_path
    )
    assert fit.code == 0, fit
    assert "fit: 1 epoch(s), 4 step(s)" in fit.out
    (saved,) = tmp_path.glob("torchplug_logs/version_0/config.yaml")
    assert yaml.safe_load(saved.read_text())["model"] == {"hidden": 4, "lr": 0.1}
    bad = core_process("fit", "--model.hidden=wide", program=(str(script),), cwd=tmp_path)
    assert bad.code == 2, bad
    assert bad.err.startswith("train.py fit: error: --model.hidden")


def test_trainer_cli_without_run_builds_the_objects(tmp_path: Path) -> None:
    cli = TrainerCLI(
        TinyModel,
        TinyData,
        args=[
            "--model.hidden=5",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            *QUIET,
        ],
        run=False,
    )
    assert isinstance(cli.model, TinyModel)
    assert cli.model.hparams.hidden == 5
    assert isinstance(cli.datamodule, TinyData)
    assert cli.trainer.max_epochs == 1
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 4


def test_trainer_cli_subclass_mode(tmp_path: Path) -> None:
    cli = TrainerCLI(
        TinyModel,
        subclass_mode_model=True,
        run=False,
        args=[f"--model={TINY}.BuggyModel", "--model.hidden=2", f"--data={TINY}.TinyData"],
    )
    assert type(cli.model).__name__ == "BuggyModel"
    with pytest.raises(SystemExit) as exit_info:
        TrainerCLI(TinyModel, subclass_mode_model=True, run=False, args=["--model=torchplug.Module"])
    assert exit_info.value.code == 2


# -- tuning -------------------------------------------------------------------------------------


def test_fit_tune_lr_writes_the_suggestion_to_the_model_and_plots_it(core: Core, config: Path) -> None:
    pytest.importorskip("matplotlib")
    result = core("fit", "--config", str(config), "--tune", "lr", "--data.init_args.n=1024")
    assert result.code == 0, result

    lines = [line for line in result.out.splitlines() if line.startswith("tune:")]
    assert lines[0].startswith("tune: learning rate ") and lines[0].endswith("(suggested after 100 steps)")
    plot = Path(lines[1].removeprefix("tune: plot "))
    assert plot.name == "lr_find.png" and plot.read_bytes()[:4] == b"\x89PNG"
    assert "fit: 2 epoch(s), 128 step(s)" in result.out


def test_fit_tune_batch_size_then_lr(core: Core, config: Path) -> None:
    result = core("fit", "--config", str(config), "--tune", "batch_size,lr")
    assert result.code == 0, result
    lines = [line for line in result.out.splitlines() if line.startswith("tune:")]
    assert lines[0] == "tune: batch size 64"  # no memory limit here: the whole dataset, one batch an epoch
    # The finder's 100 steps go on over 100 epochs of that one batch: max_epochs=2 bounds the fit, not the search
    assert lines[1].startswith("tune: learning rate ") and lines[1].endswith("(suggested after 100 steps)")
    assert "fit: 2 epoch(s), 2 step(s)" in result.out


def test_fit_tune_lr_without_training_batches_keeps_the_models_rate(core: Core, config: Path) -> None:
    result = core("fit", "--config", str(config), "--tune", "lr", "--trainer.limit_train_batches=0")
    assert result.code == 0, result
    lines = [line for line in result.out.splitlines() if line.startswith("tune:")]
    assert lines == ["tune: no learning rate suggested after 0 steps (too few; the model keeps its own)"]


def test_fit_tune_rejects_an_unknown_item(core: Core, config: Path) -> None:
    result = core("fit", "--config", str(config), "--tune", "momentum")
    assert result.code == 2
    assert "--tune=momentum: give 'lr', 'batch_size' or both ('batch_size,lr'); not 'momentum'." in result.err


@pytest.mark.parametrize("items", ["lr", "batch_size,lr"])
def test_fit_tune_lr_with_a_ckpt_path_is_refused(core: Core, config: Path, tmp_path: Path, items: str) -> None:
    # Resuming restores the optimizer, learning rate included: the rate found would be silently dropped.
    (tmp_path / "a.ckpt").write_bytes(b"")
    result = core("fit", "--config", str(config), "--tune", items, f"--ckpt_path={tmp_path / 'a.ckpt'}")
    assert result.code == 2, result
    assert result.err.startswith(
        f"core fit: error: --tune={items} with --ckpt_path={tmp_path / 'a.ckpt'}: the learning rate found would be "
        "ignored"
    ), result
    assert "Hint: tune in a fresh run" in result.err
    assert not list(tmp_path.glob("torchplug_logs"))  # refused before any work
