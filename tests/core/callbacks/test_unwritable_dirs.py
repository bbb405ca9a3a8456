"""A directory a run cannot write is refused when the run starts, naming it, before the first step.

The tests run as root, who writes through any permission bits, so "cannot write" is made real: an
immutable directory (``chattr +i``, which refuses root too) or a path under a regular file.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from torchplug import Trainer
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import ModelCheckpoint
from torchplug.loggers import CSVLogger
from torchplug.utilities.writable import unwritable


@pytest.fixture
def immutable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory that nobody, root included, can create a file in."""
    directory = tmp_path / "frozen"
    directory.mkdir()
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        yield directory
    finally:
        subprocess.run([chattr, "-i", str(directory)], check=True)


@pytest.fixture
def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "ckpts"


def test_unwritable_tries_a_real_file_in_the_directory_or_its_nearest_parent(
    tmp_path: Path, immutable_dir: Path, under_a_file: Path
) -> None:
    assert unwritable(str(tmp_path)) is None
    assert unwritable(str(tmp_path / "new" / "deeper")) is None
    assert not (tmp_path / "new").exists()  # nothing is created
    assert unwritable(str(immutable_dir)) == "PermissionError: Operation not permitted"
    assert unwritable(f"file://{immutable_dir}/run/ckpts") == (
        f"PermissionError: Operation not permitted (in {immutable_dir}, its nearest existing parent)"
    )
    assert unwritable(str(under_a_file)) == f"{under_a_file.parent} is a file, not a directory"
    assert unwritable("memory://anywhere") is None  # a remote store reports its own errors


def test_an_unwritable_checkpoint_dirpath_is_refused_before_the_first_step(
    make_trainer: Callable[..., Trainer], tiny_model: Callable[..., Any], data: Callable[..., Any], immutable_dir: Path
) -> None:
    model = tiny_model()
    steps: list[int] = []
    original = model.training_step
    model.training_step = lambda batch, idx: steps.append(idx) or original(batch, idx)  # type: ignore[method-assign]
    trainer = make_trainer(max_epochs=1, callbacks=[ModelCheckpoint(dirpath=immutable_dir / "ckpts")])
    expected = f"ModelCheckpoint(dirpath='{immutable_dir}/ckpts'): cannot write in '{immutable_dir}/ckpts' "
    with pytest.raises(MisconfigurationError, match=expected.replace("(", r"\(").replace(")", r"\)")) as info:
        trainer.fit(model, data())
    assert "Operation not permitted" in str(info.value) and "nearest existing parent" in str(info.value)
    assert steps == []


def test_an_existing_read_only_dirpath_is_named(
    make_trainer: Callable[..., Trainer], tiny_model: Callable[..., Any], data: Callable[..., Any], immutable_dir: Path
) -> None:
    trainer = make_trainer(max_epochs=1, callbacks=[ModelCheckpoint(dirpath=immutable_dir)])
    with pytest.raises(MisconfigurationError, match=f"cannot write in '{immutable_dir}' \\(PermissionError"):
        trainer.fit(tiny_model(), data())


def test_a_logger_directory_under_a_file_is_refused_before_the_first_step(
    make_trainer: Callable[..., Trainer], tiny_model: Callable[..., Any], data: Callable[..., Any], under_a_file: Path
) -> None:
    model = tiny_model()
    steps: list[int] = []
    original = model.training_step
    model.training_step = lambda batch, idx: steps.append(idx) or original(batch, idx)  # type: ignore[method-assign]
    trainer = make_trainer(max_epochs=1, logger=CSVLogger(save_dir=str(under_a_file)), enable_checkpointing=False)
    with pytest.raises(MisconfigurationError, match=r"CSVLogger\(save_dir=.*a-file/ckpts'\): cannot write in") as info:
        trainer.fit(model, data())
    assert "a-file is a file, not a directory" in str(info.value)
    assert steps == []
