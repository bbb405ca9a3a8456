"""A run resumed after a kill keeps ``save_top_k``: nothing the killed run wrote stays untracked.

A killed run leaves two kinds of files its successor does not know about: the checkpoints written
after the one resumed from (their step is later), and the file a rotation was about to remove. The
resumed run removes both when training starts, with a warning naming them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from torchplug.callbacks import Callback, ModelCheckpoint
from torchplug.io.torch_io import TorchCheckpointIO


def files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def recent(directory: Path, **kwargs: Any) -> ModelCheckpoint:
    return ModelCheckpoint(dirpath=directory, every_n_train_steps=1, save_top_k=2, save_last=True, **kwargs)


class KeepCopy(Callback):
    """Copies ``last.ckpt`` aside at one step: the checkpoint a killed run would be resumed from."""

    def __init__(self, directory: Path, step: int, target: Path) -> None:
        self.source, self.step, self.target = directory / "last.ckpt", step, target

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            shutil.copy(self.source, self.target)


class DiesInRotation(TorchCheckpointIO):
    """The torch IO, whose process 'dies' (a BaseException) when asked to remove ``victim``."""

    def __init__(self, victim: str) -> None:
        super().__init__()
        self.victim = victim

    def remove_checkpoint(self, path: str) -> None:
        if path.endswith(self.victim):
            raise KeyboardInterrupt("killed in the middle of a rotation")
        super().remove_checkpoint(path)


def test_checkpoints_written_after_the_resumed_one_are_removed(tmp_path, make_trainer, tiny_model, data) -> None:
    ckpts, resume_from = tmp_path / "ckpts", tmp_path / "step4.ckpt"
    first = make_trainer(max_steps=6, callbacks=[recent(ckpts), KeepCopy(ckpts, 4, resume_from)])
    first.fit(tiny_model(), data())  # as if killed after step 6, then resumed from what step 4 wrote
    assert files(ckpts) == ["epoch=0-step=5.ckpt", "epoch=0-step=6.ckpt", "last.ckpt"]

    checkpoint = recent(ckpts)
    with pytest.warns(UserWarning, match=r"removed 2 checkpoint\(s\) that the interrupted run left untracked"):
        make_trainer(max_steps=7, callbacks=[checkpoint]).fit(tiny_model(), data(), ckpt_path=str(resume_from))

    assert files(ckpts) == ["epoch=0-step=6.ckpt", "epoch=0-step=7.ckpt", "last.ckpt"]  # no -v1 copies
    assert checkpoint._recent_paths == [str(ckpts / "epoch=0-step=6.ckpt"), str(ckpts / "epoch=0-step=7.ckpt")]


def test_the_file_a_killed_rotation_was_removing_is_removed(tmp_path, make_trainer, tiny_model, data) -> None:
    ckpts = tmp_path / "ckpts"
    dying = make_trainer(max_steps=10, callbacks=[recent(ckpts)], plugins=[DiesInRotation("epoch=0-step=3.ckpt")])
    with pytest.raises(KeyboardInterrupt):
        dying.fit(tiny_model(), data())  # step 5 was written; removing step 3 'killed' the process
    assert files(ckpts) == ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "epoch=0-step=5.ckpt", "last.ckpt"]

    with pytest.warns(UserWarning, match=r"removed 1 checkpoint\(s\).*: epoch=0-step=3\.ckpt"):
        make_trainer(max_steps=6, callbacks=[recent(ckpts)]).fit(
            tiny_model(), data(), ckpt_path=str(ckpts / "epoch=0-step=5.ckpt")
        )
    assert files(ckpts) == ["epoch=0-step=5.ckpt", "epoch=0-step=6.ckpt", "last.ckpt"]


def test_files_this_callback_does_not_write_are_left_alone(tmp_path, make_trainer, tiny_model, data) -> None:
    ckpts, resume_from = tmp_path / "ckpts", tmp_path / "step2.ckpt"
    make_trainer(max_steps=2, callbacks=[recent(ckpts), KeepCopy(ckpts, 2, resume_from)]).fit(tiny_model(), data())
    for name in ("notes.txt", "pretrained.ckpt", "other-step=9.ckpt"):
        (ckpts / name).write_text("mine")
    make_trainer(max_steps=3, callbacks=[recent(ckpts)]).fit(tiny_model(), data(), ckpt_path=str(resume_from))
    assert {"notes.txt", "pretrained.ckpt", "other-step=9.ckpt"} <= set(files(ckpts))


def test_a_checkpoint_from_another_directory_removes_nothing(tmp_path, make_trainer, tiny_model, data) -> None:
    first, resume_from = tmp_path / "first", tmp_path / "step2.ckpt"
    make_trainer(max_steps=4, callbacks=[recent(first), KeepCopy(first, 2, resume_from)]).fit(tiny_model(), data())
    second = tmp_path / "second"
    second.mkdir()
    (second / "epoch=0-step=9.ckpt").write_text("an earlier run's")
    with pytest.warns(UserWarning, match="only best_model_path is restored"):
        make_trainer(max_steps=3, callbacks=[recent(second)]).fit(tiny_model(), data(), ckpt_path=str(resume_from))
    assert "epoch=0-step=9.ckpt" in files(second)
    assert files(first) == ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
