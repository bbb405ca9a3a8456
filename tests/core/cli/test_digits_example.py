"""The bundled example: ``core fit --config examples/digits/config.yaml``, run from the repository root.

The quick tests limit the batches; the slow ones train the whole run, once in one process (the
accuracy the README states; the time it states is measured by benchmarks/digits_example.py, never
by a test) and once over two DDP processes re-launched through the ``core`` console script.
"""

from __future__ import annotations

import csv
import logging
import re
import sys
import warnings
from pathlib import Path
from typing import Final

import pytest
import yaml

from tests.core.cli.conftest import CORE_SCRIPT, REPO_ROOT, Core, CoreProcess, needs_core_script
from torchplug.utilities.warn import reset_warned

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install 'core[examples]')")

CONFIG: Final = "examples/digits/config.yaml"
QUICK: Final = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
)
#: The accuracy the README promises (its time, a minute on 2 CPU cores, is benchmarks/digits_example.py's).
TARGET_ACCURACY: Final = 0.95
ACCURACY_LINE: Final = re.compile(r"^Final validation accuracy: ([\d.]+)%", re.MULTILINE)


@pytest.fixture
def in_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README runs the example from the repository root."""
    monkeypatch.chdir(REPO_ROOT)


def final_accuracy(out: str) -> float:
    match = ACCURACY_LINE.search(out)
    assert match, f"no final accuracy line in:\n{out}"
    return float(match.group(1)) / 100


def metric_rows(root: Path) -> list[dict[str, str]]:
    (path,) = root.glob("torchplug_logs/version_*/metrics.csv")
    with path.open() as file:
        return list(csv.DictReader(file))


@pytest.mark.usefixtures("in_repo_root")
def test_the_example_trains_with_checkpoints_and_csv_metrics(core: Core, tmp_path: Path) -> None:
    result = core("fit", "--config", CONFIG, f"--trainer.default_root_dir={tmp_path}", *QUICK)
    assert result.code == 0, result
    assert 0 <= final_accuracy(result.out) <= 1
    assert "fit: 1 epoch(s), 3 step(s)" in result.out
    (version,) = tmp_path.glob("torchplug_logs/version_*")
    assert {p.name for p in (version / "checkpoints").iterdir()} == {
        "epoch=0-val_acc=" + _best(result.out) + ".ckpt",
        "last.ckpt",
    }
    assert any(row.get("val_acc") for row in metric_rows(tmp_path))
    saved = yaml.safe_load((version / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "examples.digits.DigitsClassifier"


def _best(out: str) -> str:
    match = re.search(r"\(val_acc=([\d.]+)\)", out)
    assert match, out
    return match.group(1)


@pytest.mark.usefixtures("in_repo_root")
def test_the_example_trains_with_bf16_mixed(core: Core, tmp_path: Path) -> None:
    result = core(
        "fit",
        "--config",
        CONFIG,
        "--trainer.precision=bf16-mixed",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.callbacks=[]",
        f"--trainer.default_root_dir={tmp_path}",
        *QUICK,
    )
    assert result.code == 0, result
    assert final_accuracy(result.out) >= 0


@pytest.mark.usefixtures("in_repo_root")
def test_the_example_validates_tests_and_predicts_from_its_checkpoint(core: Core, tmp_path: Path) -> None:
    assert core("fit", "--config", CONFIG, f"--trainer.default_root_dir={tmp_path}", *QUICK).code == 0
    (last,) = tmp_path.glob("torchplug_logs/version_0/checkpoints/last.ckpt")
    expected = {"validate": "val_acc", "test": "test_acc", "predict": "predict: 2 batch(es)"}
    for command, text in expected.items():
        result = core(
            command,
            "--config",
            CONFIG,
            f"--ckpt_path={last}",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        )
        assert result.code == 0, result
        assert text in result.out, result


@pytest.mark.usefixtures("in_repo_root")
def test_the_example_runs_without_a_warning(core: Core, tmp_path: Path) -> None:
    """A bundled example runs clean: its config fits its own data (a whole epoch, as a user runs it)."""
    reset_warned()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = core("fit", "--config", CONFIG, "--trainer.max_epochs=1", f"--trainer.default_root_dir={tmp_path}")
    assert result.code == 0, result
    assert "fit: 1 epoch(s), 20 step(s)" in result.out, result


@pytest.mark.usefixtures("in_repo_root")
def test_validate_last_after_fit_loads_the_fits_last_checkpoint(
    core: Core, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As the README shows: the validate run logs into a new version, but "last" means the fit's."""
    assert core("fit", "--config", CONFIG, f"--trainer.default_root_dir={tmp_path}", *QUICK).code == 0
    (last,) = tmp_path.glob("torchplug_logs/version_0/checkpoints/last.ckpt")
    torchplug_log = logging.getLogger("torchplug")  # it may not propagate to caplog's root handler
    torchplug_log.addHandler(caplog.handler)
    try:
        with caplog.at_level("INFO", logger="torchplug"):
            result = core("validate", "--config", CONFIG, "--ckpt_path=last", f"--trainer.default_root_dir={tmp_path}")
    finally:
        torchplug_log.removeHandler(caplog.handler)
    assert result.code == 0, result
    assert "val_acc" in result.out, result
    assert f"using the newest one of the logger's other versions, {last}" in caplog.text


@pytest.mark.slow
def test_the_example_reaches_the_stated_accuracy(core_process: CoreProcess, tmp_path: Path) -> None:
    result = core_process("fit", "--config", CONFIG, f"--trainer.default_root_dir={tmp_path}", cwd=REPO_ROOT)
    assert result.code == 0, result
    assert final_accuracy(result.out) >= TARGET_ACCURACY, result
    last_val = [float(row["val_acc"]) for row in metric_rows(tmp_path) if row.get("val_acc")][-1]
    assert last_val >= TARGET_ACCURACY


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DDP re-launch is tested on Linux")
@needs_core_script
def test_the_example_trains_over_two_ddp_processes_from_the_core_script(
    core_process: CoreProcess, tmp_path: Path
) -> None:
    result = core_process(
        "fit",
        "--config",
        CONFIG,
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--trainer.max_epochs=4",
        f"--trainer.default_root_dir={tmp_path}",
        program=(str(CORE_SCRIPT),),
        cwd=REPO_ROOT,
    )
    assert result.code == 0, result
    # 1259 training images, 630 per rank in batches of 64: 10 steps per epoch (20 in one process).
    assert result.out.count("fit: 4 epoch(s), 40 step(s)") == 1, result
    assert final_accuracy(result.out) >= 0.9
    assert len(list(tmp_path.glob("torchplug_logs/version_*"))) == 1  # logs and checkpoints written once
