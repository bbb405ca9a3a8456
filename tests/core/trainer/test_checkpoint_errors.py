"""A checkpoint that does not fit the run is refused as a CheckpointLoadError naming its path and what is wrong.

* weights whose shapes or keys differ from the model's (on resume and in ``load_from_checkpoint``):
  torch's "Error(s) in loading state_dict" alone named no file;
* a checkpoint missing one section of the training state (``loops``) is not called a
  ``weights_only`` save.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "last.ckpt"
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=2))
    trainer.fit(Classifier(hidden=24), datamodule=BlobData())
    trainer.save_checkpoint(path)
    return path


def test_resuming_a_model_of_another_shape_names_the_checkpoint(saved: Path) -> None:
    trainer = torchplug.Trainer(**quiet(max_epochs=2, limit_train_batches=2))
    with pytest.raises(torchplug.CheckpointLoadError) as info:
        trainer.fit(Classifier(hidden=32), datamodule=BlobData(), ckpt_path=str(saved))
    message = str(info.value)
    assert message.startswith(f"Cannot load the checkpoint {saved} into Classifier: its weights do not fit the model (")
    assert "size mismatch for net.0.weight" in message and "Hint: build the model with the settings" in message


def test_a_missing_key_names_the_checkpoint_on_resume_and_in_load_from_checkpoint(saved: Path, tmp_path: Path) -> None:
    checkpoint = torch.load(saved, weights_only=True)
    del checkpoint["state_dict"]["net.0.bias"]
    path = tmp_path / "edited.ckpt"
    torch.save(checkpoint, path)
    trainer = torchplug.Trainer(**quiet(max_epochs=2, limit_train_batches=2))
    with pytest.raises(torchplug.CheckpointLoadError, match=r'Missing key\(s\) in state_dict: "net.0.bias"') as info:
        trainer.fit(Classifier(hidden=24), datamodule=BlobData(), ckpt_path=str(path))
    assert str(path) in str(info.value)
    with pytest.raises(torchplug.CheckpointLoadError, match=f"Cannot load the checkpoint {path} into Classifier"):
        Classifier.load_from_checkpoint(path)


def test_a_checkpoint_missing_only_its_loops_says_so(saved: Path, tmp_path: Path) -> None:
    checkpoint = torch.load(saved, weights_only=True)
    del checkpoint["loops"]
    path = tmp_path / "no-loops.ckpt"
    torch.save(checkpoint, path)
    trainer = torchplug.Trainer(**quiet(max_epochs=2, limit_train_batches=2))
    with pytest.raises(torchplug.CheckpointLoadError) as info:
        trainer.fit(Classifier(hidden=24), datamodule=BlobData(), ckpt_path=str(path))
    message = str(info.value)
    assert message.startswith(f"Cannot resume from the checkpoint {path}: its 'loops' section is missing")
    assert "weights_only" not in message
