"""An interrupted run, resumed from its checkpoint, ends with exactly the weights of an uninterrupted run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet, weights


class Interrupt(Exception):
    """Stands in for a crash or a preemption."""


class SaveAndCrash(torchplug.Callback):
    """Writes a checkpoint at a chosen point of training, then crashes the run."""

    def __init__(self, path: Path, step: int | None = None, hook: str = "on_train_batch_end") -> None:
        self.path, self.step, self.hook = path, step, hook

    def _maybe(self, trainer: torchplug.Trainer) -> None:
        if self.step is None or trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
            raise Interrupt(f"crashed after writing {self.path}")

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.hook == "on_train_batch_end":
            self._maybe(trainer)

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if self.hook == "on_validation_end" and not trainer.sanity_checking:
            self._maybe(trainer)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self.hook == "on_train_epoch_end":
            self._maybe(trainer)


def _run(
    model_kwargs: dict[str, Any],
    trainer_kwargs: dict[str, Any],
    data_kwargs: dict[str, Any],
    callbacks: list[Any] | None = None,
    ckpt_path: str | None = None,
) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Classifier(**model_kwargs)
    torch.manual_seed(1234)  # the run's own random stream (shuffling, dropout) starts here
    trainer = torchplug.Trainer(**quiet(callbacks=callbacks or [], **trainer_kwargs))
    trainer.fit(model, datamodule=BlobData(**data_kwargs), ckpt_path=ckpt_path)
    return weights(model)


SCENARIOS = {
    "mid-epoch": ({}, {"max_epochs": 3}, {}, {"step": 21}),
    "epoch-boundary": ({}, {"max_epochs": 3}, {}, {"step": 16}),
    "at-validation-end": (
        {},
        {"max_epochs": 3, "val_check_interval": 0.5},
        {},
        {"step": 24, "hook": "on_validation_end"},
    ),
    "at-epoch-end": ({}, {"max_epochs": 3}, {}, {"step": 32, "hook": "on_train_epoch_end"}),
    "step-scheduler": ({"scheduler": "step"}, {"max_epochs": 3}, {}, {"step": 13}),
    "epoch-scheduler": ({"scheduler": "epoch"}, {"max_epochs": 3}, {}, {"step": 20}),
    "mid-accumulation": ({}, {"max_epochs": 2, "accumulate_grad_batches": 3}, {}, {"step": 4}),
    "16-mixed-scaler": ({}, {"max_epochs": 2, "precision": "16-mixed"}, {}, {"step": 11}),
    "clipping-and-limits": (
        {},
        {"max_epochs": 3, "gradient_clip_val": 0.5, "limit_train_batches": 10},
        {},
        {"step": 15},
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_resumed_run_equals_uninterrupted_bit_for_bit(scenario: str, tmp_path: Path) -> None:
    model_kwargs, trainer_kwargs, data_kwargs, crash = SCENARIOS[scenario]
    reference = _run(model_kwargs, trainer_kwargs, data_kwargs)

    path = tmp_path / "interrupted.ckpt"
    with pytest.raises(Interrupt):
        _run(model_kwargs, trainer_kwargs, data_kwargs, callbacks=[SaveAndCrash(path, **crash)])
    assert path.exists()
    resumed = _run(model_kwargs, trainer_kwargs, data_kwargs, ckpt_path=str(path))

    assert reference.keys() == resumed.keys()
    mismatched = [k for k in reference if not torch.equal(reference[k], resumed[k])]
    assert not mismatched, f"{scenario}: weights differ in {mismatched}"


def test_mid_accumulation_checkpoint_carries_the_gradients(tmp_path: Path) -> None:
    path = tmp_path / "acc.ckpt"
    with pytest.raises(Interrupt):
        _run({}, {"max_epochs": 1, "accumulate_grad_batches": 3}, {}, callbacks=[SaveAndCrash(path, step=1)])
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["loops"]["fit"]["batches_done"] == 3  # saved right after the step: nothing pending
    assert "accumulated_gradients" not in checkpoint


def test_resume_skips_finished_batches_without_loading_them(tmp_path: Path) -> None:
    loaded: list[int] = []

    class Counting(torch.utils.data.Dataset[Any]):
        def __init__(self, base: Any) -> None:
            self.base = base

        def __len__(self) -> int:
            return len(self.base)

        def __getitem__(self, index: int) -> Any:
            loaded.append(index)
            return self.base[index]

    class CountingData(BlobData):
        def setup(self, stage: str) -> None:
            super().setup(stage)
            self.train_set = Counting(self.train_set)

    torch.manual_seed(0)
    path = tmp_path / "skip.ckpt"
    trainer = torchplug.Trainer(**quiet(max_epochs=1, callbacks=[SaveAndCrash(path, step=10)]))
    with pytest.raises(Interrupt):
        trainer.fit(Classifier(), datamodule=CountingData())
    loaded.clear()
    torchplug.Trainer(**quiet(max_epochs=1)).fit(Classifier(), datamodule=CountingData(), ckpt_path=str(path))
    assert len(loaded) == 512 - 10 * 32  # only the batches after the checkpoint were read


def test_fit_with_a_missing_checkpoint_names_it(trainer_args: Callable[..., Any], tmp_path: Path) -> None:
    trainer = torchplug.Trainer(**trainer_args(max_epochs=1))
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt"):
        trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path=str(tmp_path / "nope.ckpt"))


def test_a_callback_state_that_no_callback_takes_is_warned_about(tmp_path: Path, recwarn: Any) -> None:
    from torchplug.callbacks import EarlyStopping, ModelCheckpoint

    def trainer(stopping: EarlyStopping, epochs: int) -> torchplug.Trainer:
        checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
        return torchplug.Trainer(
            **quiet(max_epochs=epochs, callbacks=[stopping, checkpoint], enable_checkpointing=True)
        )

    trainer(EarlyStopping(monitor="val_loss", patience=5), 1).fit(Classifier(), datamodule=BlobData())
    last = str(tmp_path / "last.ckpt")
    trainer(EarlyStopping(monitor="val_loss", patience=5), 2).fit(Classifier(), datamodule=BlobData(), ckpt_path=last)
    assert not [w for w in recwarn if "not restored" in str(w.message)]  # the same callbacks: every state taken

    renamed = EarlyStopping(monitor="val_acc", mode="max", patience=5)
    with pytest.warns(
        UserWarning,
        match=r"The checkpoint '.*last.ckpt' holds the state of callbacks that this Trainer does not have, so it is "
        r"not restored: EarlyStopping\{'monitor': 'val_loss', 'mode': 'min'\}. Hint",
    ):
        trainer(renamed, 3).fit(Classifier(), datamodule=BlobData(), ckpt_path=last)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint of a run that finished 3 epochs (48 steps)."""
    path = tmp_path_factory.mktemp("finished") / "finished.ckpt"
    trainer = torchplug.Trainer(**quiet(max_epochs=3, limit_train_batches=16))
    trainer.fit(Classifier(), datamodule=BlobData())
    trainer.save_checkpoint(path)
    return path


def test_resuming_past_max_epochs_is_refused(finished_run: Path) -> None:
    """As in Lightning: the checkpoint is at epoch 3, max_epochs=2 would train nothing without a word."""
    trainer = torchplug.Trainer(**quiet(max_epochs=2))
    with pytest.raises(torchplug.MisconfigurationError) as info:
        trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path=str(finished_run))
    assert f"max_epochs=2 is not valid to resume from {str(finished_run)!r}: the checkpoint is at epoch 3" in str(
        info.value
    )
    assert "Hint: give max_epochs > 3" in str(info.value)


@pytest.mark.parametrize(
    ("limits", "reached"),
    [({"max_epochs": 3}, "max_epochs=3 is already reached"), ({"max_steps": 40}, "max_steps=40 is already reached")],
    ids=["max_epochs", "max_steps"],
)
def test_resuming_where_the_limits_are_reached_says_that_nothing_was_trained(
    finished_run: Path, limits: dict[str, Any], reached: str
) -> None:
    trainer = torchplug.Trainer(**quiet(**limits))
    with pytest.warns(UserWarning, match="fit\\(\\) trained nothing") as record:
        trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path=str(finished_run))
    message = next(str(w.message) for w in record if "trained nothing" in str(w.message))
    assert f"at epoch 3, global step 48, where {reached}. Hint: raise max_epochs or max_steps" in message
    assert trainer.global_step == 48


@pytest.mark.parametrize(
    ("ckpt_path", "hint"),
    [
        ("lst", "Hint: did you mean ckpt_path='last'?"),
        ("hpc", "Hint: ckpt_path='hpc' is Lightning's; here a requeued job resumes by itself"),
        ("runs/model.ckpt", "Hint: give the path of a checkpoint file or directory, or 'last', 'best' or 'auto'."),
    ],
    ids=["misspelt-last", "lightning-hpc", "missing-file"],
)
def test_a_ckpt_path_that_names_no_checkpoint_says_what_to_give(ckpt_path: str, hint: str) -> None:
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    with pytest.raises(FileNotFoundError) as info:
        trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path=ckpt_path)
    assert f"fit(ckpt_path={ckpt_path!r}): checkpoint file not found. {hint}" in str(info.value)


def test_ckpt_path_last_is_the_newest_last_checkpoint_of_any_model_checkpoint(tmp_path: Path) -> None:
    """As in Lightning; only the first ModelCheckpoint was asked, which here keeps no last checkpoint."""
    from torchplug.callbacks import ModelCheckpoint

    def callbacks() -> list[Any]:
        return [
            ModelCheckpoint(dirpath=tmp_path / "best", monitor="val_loss"),
            ModelCheckpoint(dirpath=tmp_path / "last", save_last=True),
        ]

    args = {"enable_checkpointing": True}
    torchplug.Trainer(**quiet(max_epochs=2, callbacks=callbacks(), **args)).fit(Classifier(), datamodule=BlobData())
    trainer = torchplug.Trainer(**quiet(max_epochs=3, callbacks=callbacks(), **args))
    trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path="last")
    assert trainer.ckpt_path == str(tmp_path / "last" / "last.ckpt")
    assert trainer.global_step == 48


def test_ckpt_path_best_with_several_model_checkpoints_says_which_one_it_takes(tmp_path: Path) -> None:
    from torchplug.callbacks import ModelCheckpoint

    first = ModelCheckpoint(dirpath=tmp_path / "a", monitor="val_loss")
    second = ModelCheckpoint(dirpath=tmp_path / "b", monitor="val_acc", mode="max")
    trainer = torchplug.Trainer(**quiet(max_epochs=1, callbacks=[first, second], enable_checkpointing=True))
    trainer.fit(Classifier(), datamodule=BlobData())
    with pytest.warns(UserWarning, match="the best checkpoint of the first one \\(monitor='val_loss'\\) is used"):
        trainer.validate(datamodule=BlobData(), ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == first.best_model_path


@pytest.mark.parametrize(("saved", "now"), [(None, "epoch"), ("epoch", None)], ids=["added", "dropped"])
def test_resuming_with_another_number_of_schedulers_says_what_is_restored(
    saved: str | None, now: str | None, tmp_path: Path
) -> None:
    """The scheduler states were zipped with the schedulers: a mismatch was half-applied without a word."""
    path = tmp_path / "s.ckpt"
    trainer = torchplug.Trainer(**quiet(max_epochs=1, limit_train_batches=4))
    trainer.fit(Classifier(scheduler=saved), datamodule=BlobData())
    trainer.save_checkpoint(path)
    counts = (0, 1) if saved is None else (1, 0)
    with pytest.warns(UserWarning, match=f"holds {counts[0]} learning-rate scheduler state\\(s\\), but configure_"):
        torchplug.Trainer(**quiet(max_epochs=2, limit_train_batches=4)).fit(
            Classifier(scheduler=now), datamodule=BlobData(), ckpt_path=str(path)
        )
