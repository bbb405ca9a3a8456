"""``core fit`` usage errors exit 2 with one message and no traceback, before any work is done.

A missing ``--ckpt_path`` (or Lightning's ``hpc``/``registry``, which name nothing here), a file
there that is not a whole checkpoint, a ``default_root_dir`` that cannot be written, a bad
``MASTER_PORT``, and a model (or data module) whose ``__init__`` raises: one clean message, with
the user's own frame for the last. ``--ckpt_path=auto`` is accepted: a fresh start, or a resume.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchplug
from tests.core.cli.conftest import TINY, Core, CoreProcess
from torchplug.cli import TrainerCLI
from torchplug.loggers import CSVLogger

HERE = "tests.core.cli.test_usage_errors"
QUIET = ("--trainer.enable_progress_bar=false", "--trainer.max_epochs=1", "--trainer.accelerator=cpu")


class RaisingModel(torchplug.Module):
    """A model that refuses its arguments, as user code does."""

    def __init__(self, hidden: int = 3) -> None:
        super().__init__()
        if hidden % 2:
            raise ValueError(f"hidden must be even, got {hidden}")
        self.layer = torch.nn.Linear(4, hidden)


class RaisingData(torchplug.DataModule):
    def __init__(self, path: str = "/no/such/data") -> None:
        raise FileNotFoundError(f"no data at {path}")


class RaisingCallback(torchplug.Callback):
    def __init__(self, limit: int = 1) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")


class RaisingLogger(CSVLogger):
    def __init__(self, save_dir: str = ".", level: int = 0) -> None:
        if level < 0:
            raise ValueError(f"level must be >= 0, got {level}")
        super().__init__(save_dir)


def fit(core: Core, *args: str) -> tuple[int, str]:
    result = core("fit", f"--model={TINY}.TinyModel", f"--data={TINY}.TinyData", *QUIET, *args)
    return result.code, result.err


def test_a_missing_ckpt_path_is_a_usage_error(core: Core, tmp_path: Path) -> None:
    code, err = fit(core, f"--ckpt_path={tmp_path}/nowhere.ckpt", f"--trainer.default_root_dir={tmp_path}")
    assert code == 2
    assert err.startswith(f"core fit: error: --ckpt_path={tmp_path}/nowhere.ckpt: no checkpoint file there.")
    assert not (tmp_path / "torchplug_logs").exists()  # refused before any work


def test_a_ckpt_path_that_is_not_a_checkpoint_is_a_usage_error(core: Core, tmp_path: Path) -> None:
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    code, err = fit(core, f"--ckpt_path={tmp_path}/notes.ckpt", f"--trainer.default_root_dir={tmp_path}")
    assert code == 2
    assert f"--ckpt_path={tmp_path}/notes.ckpt: Cannot load the checkpoint {tmp_path}/notes.ckpt: the file" in err


def test_ckpt_path_auto_starts_fresh_then_resumes_from_the_newest_checkpoint(tmp_path: Path) -> None:
    args = ["fit", f"--model={TINY}.TinyModel", f"--data={TINY}.TinyData", *QUIET, "--ckpt_path=auto"]
    args += ["--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"]
    first = TrainerCLI(args=args)
    assert first.trainer.ckpt_path is None and first.trainer.global_step == 4  # nothing to resume: a fresh start
    second = TrainerCLI(args=[*args, "--trainer.max_epochs=2"])
    assert second.trainer.ckpt_path == str(tmp_path / "checkpoints" / "epoch=0-step=4.ckpt")
    assert second.trainer.global_step == 8


@pytest.mark.parametrize(("word", "hint"), [("hpc", "--ckpt_path=auto"), ("registry", "'auto'")])
def test_lightning_ckpt_path_words_are_refused_with_the_replacement(
    core: Core, tmp_path: Path, word: str, hint: str
) -> None:
    code, err = fit(core, f"--ckpt_path={word}", f"--trainer.default_root_dir={tmp_path}")
    assert code == 2
    assert err.startswith(f"core fit: error: --ckpt_path={word}: not a choice here: it is Lightning's"), err
    assert hint in err.split("Hint:")[1]
    assert "Traceback" not in err


def test_an_unwritable_default_root_dir_is_a_usage_error(core: Core, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    code, err = fit(core, f"--trainer.default_root_dir={tmp_path}/a-file/runs")
    assert code == 2
    assert err.startswith(
        f"core fit: error: --trainer.default_root_dir={tmp_path}/a-file/runs: logs and checkpoints cannot be "
        f"written there ({tmp_path}/a-file is a file, not a directory)."
    )


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_a_bad_master_port_is_a_usage_error_naming_it(
    core: Core, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: str
) -> None:
    monkeypatch.setenv("MASTER_PORT", port)
    code, err = fit(core, "--trainer.devices=2", "--trainer.strategy=ddp", f"--trainer.default_root_dir={tmp_path}")
    assert code == 2
    assert err.startswith(f"core fit: error: MASTER_PORT='{port}' is not valid. Allowed: an integer from 1 to 65535.")


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (
            f"--model={HERE}.RaisingModel",
            f"--model={HERE}.RaisingModel: RaisingModel.__init__ raised ValueError: hidden must be even, got 3",
        ),
        (
            f"--data={HERE}.RaisingData",
            f"--data={HERE}.RaisingData: RaisingData.__init__ raised FileNotFoundError: no data at /no/such/data",
        ),
    ],
    ids=["model", "data"],
)
def test_an_init_that_raises_is_one_message_with_the_users_frame(core: Core, option: str, expected: str) -> None:
    args = [option] if option.startswith("--model") else [f"--model={TINY}.TinyModel", option]
    result = core("fit", *args, *QUIET)
    assert result.code == 2
    first, where, code, *_ = result.err.splitlines()
    assert first == f"core fit: error: {expected}"
    assert where.startswith(f'  File "{__file__}", line ') and where.endswith(", in __init__")
    assert code.strip().startswith("raise ")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            [f"--trainer.callbacks+={HERE}.RaisingCallback", "--trainer.callbacks.limit=-1"],
            f"--trainer.callbacks={HERE}.RaisingCallback: RaisingCallback.__init__ raised ValueError: limit must be "
            ">= 0, got -1",
        ),
        (
            [
                "--trainer.callbacks+=ModelSummary",
                f"--trainer.callbacks+={HERE}.RaisingCallback",
                "--trainer.callbacks.limit=-2",
            ],
            f"--trainer.callbacks[1]={HERE}.RaisingCallback: RaisingCallback.__init__ raised ValueError: limit must "
            "be >= 0, got -2",
        ),
        (
            [f"--trainer.callbacks={HERE}.RaisingCallback", "--trainer.callbacks.limit=-1"],
            f"--trainer.callbacks={HERE}.RaisingCallback: RaisingCallback.__init__ raised ValueError: limit must be "
            ">= 0, got -1",
        ),
        (
            [f"--trainer.logger={HERE}.RaisingLogger", "--trainer.logger.init_args.level=-1"],
            f"--trainer.logger={HERE}.RaisingLogger: RaisingLogger.__init__ raised ValueError: level must be >= 0, "
            "got -1",
        ),
    ],
    ids=["callbacks-appended", "second-of-two-callbacks", "one-callback", "logger"],
)
def test_a_trainer_class_whose_init_raises_is_named_with_its_option(
    core: Core, options: list[str], expected: str
) -> None:
    # jsonargparse tried each member of the option's union type and kept only the first one's complaint
    # ("Not a valid subclass of Callback", "Expected a <class 'bool'>"), hiding the class's own error.
    result = core("fit", f"--model={TINY}.TinyModel", *options, *QUIET)
    assert result.code == 2, result
    first, where, code, *_ = result.err.splitlines()
    assert first == f"core fit: error: {expected}"
    assert where.startswith(f'  File "{__file__}", line ') and where.endswith(", in __init__")
    assert code.strip().startswith("raise ValueError")


def test_in_a_users_script_the_init_error_is_named_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        TrainerCLI(RaisingModel, args=["fit", *QUIET], prog="train.py")
    assert info.value.code == 2
    assert "train.py fit: error: " in capsys.readouterr().err


def test_a_real_process_shows_no_traceback(core_process: CoreProcess, tmp_path: Path) -> None:
    result = core_process("fit", f"--model={HERE}.RaisingModel", *QUIET)
    assert result.code == 2, result
    assert "Traceback" not in result.err
    assert "RaisingModel.__init__ raised ValueError: hidden must be even, got 3" in result.err
    missing = core_process("fit", f"--model={TINY}.TinyModel", f"--ckpt_path={tmp_path}/x.ckpt", *QUIET)
    assert missing.code == 2, missing
    assert "Traceback" not in missing.err
