"""The file a spawned worker hands its results back through: private, removed, and loaded safely."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.core.strategies.runner import environment, linux_only
from torchplug.strategies.launchers.multiprocessing import read_results, results_file


class Prediction:
    """What a predict_step may return: an object of the user's own class."""

    def __init__(self, label: str) -> None:
        self.label = label


def test_the_results_file_lives_in_a_private_directory_removed_afterwards() -> None:
    with results_file("torchplug-test-") as path:
        directory = os.path.dirname(path)
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700  # no other user can read or replace it
        assert not os.path.exists(path)
        torch.save({"result": 1}, path)
    assert not os.path.exists(directory)


def test_results_of_plain_data_load_with_weights_only(caplog: pytest.LogCaptureFixture) -> None:
    with results_file() as path:
        torch.save({"result": [{"val_loss": 0.5}], "state_dict": {"w": torch.ones(2)}}, path)
        with caplog.at_level(logging.INFO, logger="torchplug"):
            loaded = read_results(path)
    assert loaded["result"] == [{"val_loss": 0.5}]
    assert caplog.text == ""  # no fallback


def test_results_holding_user_objects_load_in_full_and_the_log_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with results_file() as path:
        torch.save({"result": [Prediction("cat")]}, path)
        with caplog.at_level(logging.INFO, logger="torchplug"):
            loaded = read_results(path)
    assert loaded["result"][0].label == "cat"
    assert "hold objects a weights-only load refuses" in caplog.text
    assert "Prediction" in caplog.text


def test_a_worker_that_wrote_nothing_is_an_error() -> None:
    with results_file() as path, pytest.raises(RuntimeError, match="The first worker finished without writing"):
        read_results(path, "The first worker")


@pytest.mark.slow
@linux_only
def test_ddp_spawn_leaves_nothing_of_its_own_in_the_temporary_directory(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "spawn.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torchplug
            from tests.core.strategies.scripts.common import Regressor, loader

            if __name__ == "__main__":
                trainer = torchplug.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1,
                                            logger=False, enable_checkpointing=False, enable_progress_bar=False)
                trainer.fit(Regressor(), loader(32, 8))
                print("global_step", trainer.global_step)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], env=environment(TMPDIR=str(tmp)), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "global_step 2" in result.stdout
    assert [name for name in os.listdir(tmp) if name.startswith("torchplug")] == []  # torch keeps its own caches
