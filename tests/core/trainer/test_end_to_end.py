"""A real classifier trained end to end on the CPU: fit, validate, test and predict, through every precision."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier


def test_fit_validate_test_predict(
    classifier: Callable[..., Any],
    data: Callable[..., Any],
    trainer_args: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    model, datamodule = classifier(), data()
    trainer = torchplug.Trainer(**trainer_args(max_epochs=4, default_root_dir=tmp_path))
    trainer.fit(model, datamodule=datamodule)
    assert trainer.current_epoch == 4
    assert trainer.global_step == 4 * 16  # 512 samples / 32 per batch
    assert trainer.state.status.value == "finished"

    (validated,) = trainer.validate(model, datamodule=datamodule)
    assert validated["val_acc"] > 0.95
    (tested,) = trainer.test(model, datamodule=datamodule)
    assert tested["test_acc"] == pytest.approx(validated["val_acc"])
    predictions = trainer.predict(model, datamodule=datamodule)
    labels = torch.cat(predictions)
    assert labels.shape == (128,)
    assert (labels == datamodule.val_set.tensors[1]).float().mean() > 0.95


def test_dataloaders_can_be_passed_directly(classifier: Callable[..., Any], trainer_args: Callable[..., Any]) -> None:
    datamodule = BlobData()
    datamodule.setup("fit")
    model = classifier()
    trainer = torchplug.Trainer(**trainer_args(max_epochs=3))
    trainer.fit(model, datamodule.train_dataloader(), datamodule.val_dataloader())
    assert trainer.callback_metrics["val_acc"] > 0.9
    (result,) = trainer.test(model, dataloaders=datamodule.test_dataloader())
    assert result["test_acc"] > 0.9


@pytest.mark.parametrize(
    "precision", ["64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", 64, 32, 16, "bf16"]
)
def test_every_precision_trains_the_classifier(
    precision: Any, classifier: Callable[..., Any], data: Callable[..., Any], trainer_args: Callable[..., Any]
) -> None:
    model = classifier(lr=0.05)
    trainer = torchplug.Trainer(**trainer_args(max_epochs=4, precision=precision))
    trainer.fit(model, datamodule=data())
    (result,) = trainer.validate(model, datamodule=data())
    assert result["val_acc"] > 0.9, (precision, result)
    expected = {"64-true": torch.float64, 64: torch.float64, "16-true": torch.float16, "bf16-true": torch.bfloat16}
    assert next(model.parameters()).dtype == expected.get(precision, torch.float32)


def test_16_mixed_uses_a_gradient_scaler(
    classifier: Callable[..., Any], data: Callable[..., Any], trainer_args: Callable[..., Any]
) -> None:
    trainer = torchplug.Trainer(**trainer_args(max_epochs=1, precision="16-mixed"))
    trainer.fit(classifier(), datamodule=data())
    state = trainer.precision_plugin.state_dict()
    assert state, "16-mixed must save its scaler state"


@pytest.mark.parametrize("io", ["torch", "async"])
def test_both_checkpoint_ios_save_and_resume(
    io: str, classifier: Callable[..., Any], data: Callable[..., Any], trainer_args: Callable[..., Any], tmp_path: Path
) -> None:
    trainer = torchplug.Trainer(**trainer_args(max_epochs=2, plugins=[io]))
    model = classifier()
    trainer.fit(model, datamodule=data())
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    trainer.checkpoint_io.flush()
    assert torch.load(path, weights_only=True)["global_step"] == 32
    reloaded = Classifier.load_from_checkpoint(str(path))
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))
    resumed = torchplug.Trainer(**trainer_args(max_epochs=3, plugins=[io]))
    resumed.fit(classifier(), datamodule=data(), ckpt_path=str(path))
    assert resumed.global_step == 48


def test_checkpoint_holds_only_weights_only_safe_data(
    classifier: Callable[..., Any], data: Callable[..., Any], trainer_args: Callable[..., Any], tmp_path: Path
) -> None:
    trainer = torchplug.Trainer(**trainer_args(max_epochs=1, precision="16-mixed"))
    trainer.fit(classifier(scheduler="epoch"), datamodule=data(batch_size=48))
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    checkpoint = torch.load(tmp_path / "x.ckpt", weights_only=True)  # raises on any unsafe object
    assert {
        "state_dict",
        "optimizer_states",
        "lr_schedulers",
        "loops",
        "rng",
        "precision",
        "hyper_parameters",
        "callbacks",
    } <= set(checkpoint)
    assert checkpoint["hyper_parameters"]["scheduler"] == "epoch"
    assert checkpoint["datamodule_hyper_parameters"] == {"batch_size": 48, "n": 512, "shuffle": True}


def test_load_from_checkpoint_rebuilds_from_hyperparameters(
    classifier: Callable[..., Any], data: Callable[..., Any], trainer_args: Callable[..., Any], tmp_path: Path
) -> None:
    trainer = torchplug.Trainer(**trainer_args(max_steps=3))
    trainer.fit(classifier(hidden=24), datamodule=data())
    trainer.save_checkpoint(tmp_path / "w.ckpt", weights_only=True)
    model = Classifier.load_from_checkpoint(str(tmp_path / "w.ckpt"), lr=0.5)
    assert model.hparams.hidden == 24 and model.hparams.lr == 0.5
    with pytest.raises(torchplug.MisconfigurationError, match="holds only weights"):
        torchplug.Trainer(**trainer_args(max_steps=5)).fit(
            classifier(hidden=24), datamodule=data(), ckpt_path=str(tmp_path / "w.ckpt")
        )


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint of a Classifier(hidden=24) after 2 steps."""
    path = tmp_path_factory.mktemp("weights") / "w.ckpt"
    trainer = torchplug.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=2
    )
    trainer.fit(Classifier(hidden=24), datamodule=BlobData())
    trainer.save_checkpoint(path, weights_only=True)
    return str(path)


class WithHead(Classifier):
    """A Classifier with one more layer than the checkpoint holds."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.head = torch.nn.Linear(4, 2)


def test_load_from_checkpoint_strict_false_names_the_keys_that_do_not_match(weights_file: str) -> None:
    """As in Lightning; a partial load was silent."""
    with pytest.warns(UserWarning, match="strict=False\\): keys that do not match were skipped") as record:
        WithHead.load_from_checkpoint(weights_file, strict=False)
    assert "missing from the checkpoint (left as initialised): ['head.weight', 'head.bias']" in str(record[0].message)


def test_load_from_checkpoint_strict_none_is_the_modules_strict_loading(weights_file: str) -> None:
    """None is Lightning's default (the module's strict_loading, True); it loaded non-strictly without a word."""
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "head\.weight"'):
        WithHead.load_from_checkpoint(weights_file, strict=None)


def test_load_from_checkpoint_names_an_argument_it_leaves_out_as_given(weights_file: str) -> None:
    """A misspelt override was reported as a "saved hyperparameter", and dropped."""
    with pytest.warns(UserWarning, match=r"\['lrr'\] are not arguments of Classifier\.__init__, so") as w:
        model = Classifier.load_from_checkpoint(weights_file, lrr=0.5)
    assert "Classifier.load_from_checkpoint(" in str(w[0].message) and ", lrr=...)" in str(w[0].message)
    assert "Hint: Classifier.__init__ takes dropout, hidden, lr, momentum, scheduler." in str(w[0].message)
    assert model.hparams.lr == 0.05 and model.hparams.hidden == 24
