"""ModelCheckpoint: which checkpoints are written, kept and removed, always through the CheckpointIO."""

from __future__ import annotations

import io
import os
import re
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
import yaml

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import ModelCheckpoint
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.loggers.csv_logs import CSVLogger

SCORES = [5.0, 3.0, 4.0, 1.0, 2.0]  # "score" logged in validation, one value per epoch


def files(directory: str | Path) -> list[str]:
    """The checkpoint files in ``directory`` (no temporary or hidden files expected either)."""
    if not os.path.isdir(directory):
        return []
    return sorted(os.listdir(directory))


def test_callback_runs_last_and_is_exported() -> None:
    import torchplug.callbacks as callbacks

    assert callbacks.ModelCheckpoint is ModelCheckpoint
    assert ModelCheckpoint.monitors_metrics is True


@pytest.mark.parametrize(
    ("mode", "kept_epochs", "best_epoch"),
    [("min", [3, 4], 3), ("max", [0, 2], 0)],
    ids=["min-keeps-lowest", "max-keeps-highest"],
)
def test_top_k_keeps_exactly_the_k_best(tmp_path, make_trainer, tiny_model, data, mode, kept_epochs, best_epoch):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpts", monitor="score", mode=mode, save_top_k=2, filename="{epoch}-{score:.1f}"
    )
    trainer = make_trainer(max_epochs=5, callbacks=[checkpoint])
    trainer.fit(tiny_model(scores=SCORES), data(), data())

    expected = [f"epoch={e}-score={SCORES[e]:.1f}.ckpt" for e in kept_epochs]
    assert files(tmp_path / "ckpts") == sorted(expected)
    assert sorted(os.path.basename(p) for p in checkpoint.best_k_models) == sorted(expected)
    assert os.path.basename(checkpoint.best_model_path) == f"epoch={best_epoch}-score={SCORES[best_epoch]:.1f}.ckpt"
    assert float(checkpoint.best_model_score) == SCORES[best_epoch]
    worst = max if mode == "min" else min
    assert float(checkpoint.kth_value) == worst(SCORES[e] for e in kept_epochs)


@pytest.mark.parametrize(("save_top_k", "count"), [(-1, 5), (0, 0)], ids=["all", "none"])
def test_save_top_k_all_or_none(tmp_path, make_trainer, tiny_model, data, save_top_k, count):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=save_top_k)
    make_trainer(max_epochs=5, callbacks=[checkpoint]).fit(tiny_model(scores=SCORES), data(), data())

    assert len(files(tmp_path)) == count


def test_without_monitor_keeps_the_latest_k(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=2)
    make_trainer(max_epochs=4, callbacks=[checkpoint]).fit(tiny_model(), data())

    assert files(tmp_path) == ["epoch=2-step=24.ckpt", "epoch=3-step=32.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "epoch=3-step=32.ckpt")
    assert checkpoint.best_model_score is None


def test_default_is_one_checkpoint_per_epoch_in_the_logger_directory(tmp_path, make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=2, logger=CSVLogger(tmp_path))
    trainer.fit(tiny_model(), data(), data())

    checkpoint = trainer.checkpoint_callback
    assert checkpoint.dirpath == f"{trainer.log_dir}/checkpoints"
    assert files(checkpoint.dirpath) == ["epoch=1-step=16.ckpt"]


def test_save_last_writes_last_ckpt_beside_the_top_k(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, save_last=True)
    make_trainer(max_epochs=5, callbacks=[checkpoint]).fit(tiny_model(scores=SCORES), data(), data())

    assert files(tmp_path) == ["epoch=3-step=32.ckpt", "last.ckpt"]
    assert checkpoint.last_model_path == str(tmp_path / "last.ckpt")
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert last["global_step"] == 40  # written at the last save point, not at the best one


def test_save_last_only_with_save_top_k_zero(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=0, save_last=True)
    make_trainer(max_epochs=2, callbacks=[checkpoint]).fit(tiny_model(), data())

    assert files(tmp_path) == ["last.ckpt"]


def test_every_n_train_steps_saves_right_after_the_optimizer_step(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}")
    trainer = make_trainer(max_epochs=2, accumulate_grad_batches=2, callbacks=[checkpoint])  # 4 steps per epoch
    trainer.fit(tiny_model(), data())

    assert files(tmp_path) == ["step=3.ckpt", "step=6.ckpt"]
    saved = torch.load(tmp_path / "step=3.ckpt", weights_only=True)
    assert saved["global_step"] == 3
    assert saved["loops"]["fit"]["batches_done"] == 6  # the batch of the 3rd step, not the one after


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        (timedelta(microseconds=1), [f"epoch=0-step={step}.ckpt" for step in range(1, 9)]),
        (timedelta(hours=1), []),
    ],
    ids=["passed-at-every-step", "never-passed"],
)
def test_train_time_interval_saves_after_the_steps_that_end_it(
    tmp_path, make_trainer, tiny_model, data, interval, expected
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, train_time_interval=interval, save_top_k=-1)
    make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == sorted(expected)  # and no save at the epoch's end: the interval is the schedule


def test_validation_twice_per_epoch_saves_after_each_validation(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=-1, filename="{step}")
    make_trainer(max_epochs=1, val_check_interval=0.5, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == ["step=4.ckpt", "step=8.ckpt"]


def test_validation_every_other_epoch_saves_when_it_runs(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=-1, filename="{epoch}")
    make_trainer(max_epochs=4, check_val_every_n_epoch=2, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == ["epoch=1.ckpt", "epoch=3.ckpt"]


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_checkpoints_on_fsspec_urls(tmp_path, make_trainer, tiny_model, data, scheme):
    if scheme == "memory":
        dirpath = f"memory://torchplug-test-{uuid.uuid4().hex[:8]}/ckpts"
    else:
        dirpath = f"file://{tmp_path}/ckpts"
    fs, root = fsspec.url_to_fs(dirpath)
    try:
        checkpoint = ModelCheckpoint(dirpath=dirpath, monitor="score", save_top_k=2, save_last=True)
        trainer = make_trainer(max_epochs=5, callbacks=[checkpoint])
        model = tiny_model(scores=SCORES)
        trainer.fit(model, data(), data())

        names = sorted(os.path.basename(p) for p in fs.ls(root, detail=False))
        assert names == ["epoch=3-step=32.ckpt", "epoch=4-step=40.ckpt", "last.ckpt"]
        assert checkpoint.best_model_path.startswith(f"{scheme}://")
        assert trainer.test(model, data(), ckpt_path="best")[0]["test_loss"] >= 0
    finally:
        if scheme == "memory":
            fs.rm(root.rsplit("/", 1)[0], recursive=True)


def test_every_write_removal_and_existence_check_goes_through_the_checkpoint_io(
    tmp_path, make_trainer, tiny_model, data, recording_io
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    trainer = make_trainer(max_epochs=5, callbacks=[checkpoint], plugins=[recording_io])
    trainer.fit(tiny_model(scores=SCORES), data(), data())

    saved, removed = recording_io.paths("save"), recording_io.paths("remove")
    # Scores 5, 3, 4, 1, 2 with k=2: epoch 2 replaces epoch 0, epoch 3 replaces 2, epoch 4 replaces 1.
    assert removed == [str(tmp_path / "epoch=0.ckpt"), str(tmp_path / "epoch=2.ckpt"), str(tmp_path / "epoch=1.ckpt")]
    # What is on disk is exactly what the IO wrote and did not remove.
    assert files(tmp_path) == sorted({os.path.basename(p) for p in saved} - {os.path.basename(p) for p in removed})
    # Every removal waits for pending writes first.
    for index, (call, _) in enumerate(recording_io.calls):
        if call == "remove":
            assert recording_io.calls[index - 1] == ("flush", None)
    # Names are checked with the IO (for the version counter), never with the filesystem directly.
    assert ("exists", str(tmp_path / "epoch=0.ckpt")) in recording_io.calls


class SlowRecordingIO(TorchCheckpointIO):
    """A torch IO whose writes take a while, recording when each starts and ends (from any thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _event(self, kind: str, path: str) -> None:
        with self._lock:
            self.events.append((kind, path))

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        self._event("start", path)
        time.sleep(0.03)
        super().save_checkpoint(checkpoint, path, storage_options)
        self._event("end", path)

    def remove_checkpoint(self, path: str) -> None:
        self._event("remove", path)
        super().remove_checkpoint(path)


def assert_no_removal_during_a_write(events: list[tuple[str, str]]) -> None:
    writing: set[str] = set()
    for kind, path in events:
        if kind == "start":
            writing.add(path)
        elif kind == "end":
            writing.discard(path)
        else:
            assert not writing, f"removed {path} while {sorted(writing)} were being written"


class NaiveAsyncIO(TorchCheckpointIO):
    """An asynchronous IO like Lightning's: serialises on the caller, writes on a thread; remove does NOT wait.

    Only :meth:`flush` waits, so the test shows that ModelCheckpoint flushes before rotating.
    """

    def __init__(self, base: SlowRecordingIO) -> None:
        super().__init__()
        self.base = base
        self._executor = ThreadPoolExecutor(max_workers=1)
        self._futures: list[Future[None]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        snapshot = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
        self._futures.append(self._executor.submit(self.base.save_checkpoint, snapshot, path))

    def remove_checkpoint(self, path: str) -> None:
        self.base.remove_checkpoint(path)

    def flush(self) -> None:
        futures, self._futures = self._futures, []
        for future in futures:
            future.result()

    def teardown(self) -> None:
        self.flush()
        self._executor.shutdown(wait=True)


def test_rotation_flushes_an_asynchronous_io_before_removing(tmp_path, make_trainer, tiny_model, data):
    base = SlowRecordingIO()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, save_last=True)
    trainer = make_trainer(max_epochs=5, callbacks=[checkpoint], plugins=[NaiveAsyncIO(base)])
    trainer.fit(tiny_model(scores=SCORES), data(), data())

    assert [kind for kind, _ in base.events].count("remove") == 2  # epoch 0, then epoch 1, were replaced
    assert_no_removal_during_a_write(base.events)
    assert files(tmp_path) == ["epoch=3-step=32.ckpt", "last.ckpt"]


def test_rotation_with_async_checkpoint_io_never_removes_during_a_write(tmp_path, make_trainer, tiny_model, data):
    async_io = pytest.importorskip("torchplug.io.async_io", reason="torchplug.io.async_io is not written yet")
    base = SlowRecordingIO()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, save_last=True)
    trainer = make_trainer(max_epochs=5, callbacks=[checkpoint], plugins=[async_io.AsyncCheckpointIO(base)])
    trainer.fit(tiny_model(scores=SCORES), data(), data())

    assert_no_removal_during_a_write(base.events)
    assert files(tmp_path) == ["epoch=3-step=32.ckpt", "epoch=4-step=40.ckpt", "last.ckpt"]
    for name in files(tmp_path):
        torch.load(tmp_path / name, weights_only=True)  # every kept file is complete


@pytest.mark.parametrize(
    ("filename", "auto_insert", "metrics", "expected"),
    [
        (None, True, {"epoch": 0, "step": 100}, "epoch=0-step=100.ckpt"),
        ("{epoch}-{val_loss:.2f}", True, {"epoch": 2, "val_loss": 0.31415}, "epoch=2-val_loss=0.31.ckpt"),
        ("{epoch:02d}-{val_loss:.2f}", False, {"epoch": 2, "val_loss": 0.31415}, "02-0.31.ckpt"),
        ("best-{val/acc:.3f}", True, {"val/acc": torch.tensor(0.98765)}, "best-val/acc=0.988.ckpt"),
        ("{epoch}-{epoch_loss}", True, {"epoch": 1, "epoch_loss": 2}, "epoch=1-epoch_loss=2.ckpt"),
        ("{epoch}-{missing}", True, {"epoch": 1}, "epoch=1-missing=0.ckpt"),
        ("model.ckpt", True, {}, "model.ckpt"),
    ],
    ids=[
        "default",
        "format-spec",
        "no-metric-name",
        "slash-and-tensor",
        "longer-name-first",
        "missing-is-0",
        "extension-given",
    ],
)
def test_filename_templates(filename, auto_insert, metrics, expected):
    checkpoint = ModelCheckpoint(dirpath="memory://x", filename=filename, auto_insert_metric_name=auto_insert)
    assert checkpoint.format_checkpoint_name(metrics) == f"memory://x/{expected}"


@pytest.mark.parametrize("filename", ["{epoch", "{epoch}-{}", "{val_loss:.2q}"], ids=["unclosed", "empty", "format"])
def test_a_filename_that_cannot_be_filled_in_is_refused_at_once(filename):
    with pytest.raises(
        MisconfigurationError, match=rf"ModelCheckpoint\(filename='{re.escape(filename)}'\) is not valid.*Hint"
    ):
        ModelCheckpoint(filename=filename)


def test_a_filename_format_that_does_not_fit_the_metric_names_the_template(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val_loss:d}")
    with pytest.raises(
        MisconfigurationError,
        match=r"filename='\{epoch\}-\{val_loss:d\}'\) is not valid: ValueError: Unknown format code 'd'.*'val_loss': ",
    ):
        make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data(), data())


def test_a_filename_metric_that_is_never_logged_reads_0_with_one_warning(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}-{val_acc:.2f}", save_top_k=-1)
    with pytest.warns(UserWarning, match=r"the metric 'val_acc' is not logged \(logged: .*val_loss\).*Hint") as seen:
        make_trainer(max_epochs=2, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == ["epoch=0-val_acc=0.00.ckpt", "epoch=1-val_acc=0.00.ckpt"]
    assert len([w for w in seen if "is not logged" in str(w.message)]) == 1


def test_a_filename_metric_not_logged_yet_before_validation_is_not_warned(
    tmp_path, make_trainer, tiny_model, data, recwarn
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{step}-{val_loss:.1f}", every_n_train_steps=4)
    make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == ["step=8-val_loss=0.0.ckpt"]  # saved (as at step 4) before validation logged it
    assert not [w for w in recwarn if "is not logged" in str(w.message)]


def test_a_dirpath_that_is_a_file_is_refused_when_fit_starts(tmp_path, make_trainer, tiny_model, data):
    (tmp_path / "ckpts").write_text("not a directory")
    trainer = make_trainer(max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpts")])
    with pytest.raises(
        MisconfigurationError, match=r"ModelCheckpoint\(dirpath='.*ckpts'\) is not valid: it is a file.*Hint"
    ):
        trainer.fit(tiny_model(), data(), data())
    assert trainer.global_step == 0


@pytest.mark.parametrize(
    ("checkpoint_kwargs", "trainer_kwargs", "with_validation", "reason"),
    [
        ({"save_on_train_epoch_end": False}, {}, False, "this fit runs no validation"),
        ({}, {"check_val_every_n_epoch": 3}, True, "check_val_every_n_epoch=3 puts the next validation in epoch 2"),
        ({"save_on_train_epoch_end": False}, {"limit_val_batches": 0}, True, "this fit runs no validation"),
    ],
    ids=["save-after-validation-without-validation", "validation-after-max-epochs", "limit-val-batches-0"],
)
def test_saving_only_after_a_validation_that_never_runs_is_warned(
    tmp_path, make_trainer, tiny_model, data, checkpoint_kwargs, trainer_kwargs, with_validation, reason
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, **checkpoint_kwargs)
    trainer = make_trainer(max_epochs=2, callbacks=[checkpoint], **trainer_kwargs)
    loaders = (data(), data()) if with_validation else (data(),)
    with pytest.warns(UserWarning, match=rf"saves after validation, but {reason}.*write no checkpoint.*Hint"):
        trainer.fit(tiny_model(), *loaders)
    assert files(tmp_path) == []


def test_saving_after_a_validation_that_runs_is_not_warned(tmp_path, make_trainer, tiny_model, data, recwarn):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_on_train_epoch_end=False)
    make_trainer(max_epochs=2, check_val_every_n_epoch=2, callbacks=[checkpoint]).fit(tiny_model(), data(), data())

    assert files(tmp_path) == ["epoch=1-step=16.ckpt"]
    assert not [w for w in recwarn if "saves after validation" in str(w.message)]


def test_version_counter_adds_v1_for_a_name_taken(tmp_path, make_trainer, tiny_model, data):
    for _ in range(2):
        checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_last=True)
        make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data())

    assert files(tmp_path) == ["epoch=0-v1.ckpt", "epoch=0.ckpt", "last-v1.ckpt", "last.ckpt"]
    assert checkpoint.best_model_path.endswith("epoch=0-v1.ckpt")


def test_without_version_counter_a_name_is_overwritten(tmp_path, make_trainer, tiny_model, data):
    for _ in range(2):
        checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", enable_version_counter=False)
        make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data())

    assert files(tmp_path) == ["epoch=0.ckpt"]


def test_fixed_name_with_top_1_is_overwritten_in_place(tmp_path, make_trainer, tiny_model, data, recording_io):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="best", monitor="score")
    make_trainer(max_epochs=5, callbacks=[checkpoint], plugins=[recording_io]).fit(
        tiny_model(scores=SCORES), data(), data()
    )

    assert files(tmp_path) == ["best.ckpt"]
    assert recording_io.paths("remove") == []
    assert torch.load(tmp_path / "best.ckpt", weights_only=True)["epoch"] == 3


def test_resume_from_last_then_test_the_best(tmp_path, make_trainer, tiny_model, data, recording_io):
    def callback() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="score", save_top_k=2, save_last=True)

    make_trainer(max_epochs=2, callbacks=[callback()]).fit(tiny_model(scores=SCORES), data(), data())
    assert files(tmp_path / "ckpts") == ["epoch=0-step=8.ckpt", "epoch=1-step=16.ckpt", "last.ckpt"]

    checkpoint = callback()
    trainer = make_trainer(max_epochs=5, callbacks=[checkpoint], plugins=[recording_io])
    model = tiny_model(scores=SCORES)
    trainer.fit(model, data(), data(), ckpt_path="last")

    assert recording_io.paths("load") == [str(tmp_path / "ckpts" / "last.ckpt")]
    # The restored bookkeeping rotated the first run's files too: the same files as one run of 5 epochs.
    assert files(tmp_path / "ckpts") == ["epoch=3-step=32.ckpt", "epoch=4-step=40.ckpt", "last.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "ckpts" / "epoch=3-step=32.ckpt")

    trainer.test(model, data(), ckpt_path="best")
    assert recording_io.paths("load")[-1] == checkpoint.best_model_path


def test_find_last_checkpoint(tmp_path):
    io = TorchCheckpointIO()
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    assert checkpoint.find_last_checkpoint(io) is None
    io.save_checkpoint({"x": 1}, str(tmp_path / "last.ckpt"))
    assert checkpoint.find_last_checkpoint(io) == str(tmp_path / "last.ckpt")
    checkpoint.last_model_path = str(tmp_path / "last-v1.ckpt")
    assert checkpoint.find_last_checkpoint(io) == str(tmp_path / "last.ckpt")  # recorded one missing
    io.save_checkpoint({"x": 2}, checkpoint.last_model_path)
    assert checkpoint.find_last_checkpoint(io) == checkpoint.last_model_path


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, save_last=True)
    make_trainer(max_epochs=5, callbacks=[checkpoint]).fit(tiny_model(scores=SCORES), data(), data())

    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["callbacks"][checkpoint.state_key]
    restored = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, save_last=True)
    restored.load_state_dict(saved)
    assert restored.best_model_path == checkpoint.best_model_path
    assert restored.best_k_models == checkpoint.best_k_models
    assert restored.kth_best_model_path == checkpoint.kth_best_model_path
    assert restored.last_model_path == checkpoint.last_model_path
    assert float(restored.best_model_score) == 1.0

    elsewhere = ModelCheckpoint(dirpath=tmp_path / "other", monitor="score")
    with pytest.warns(UserWarning, match="only best_model_path is restored"):
        elsewhere.load_state_dict(saved)
    assert elsewhere.best_model_path == checkpoint.best_model_path
    assert elsewhere.best_k_models == {}


def test_state_key_tells_configurations_apart():
    keys = {
        ModelCheckpoint(monitor="a").state_key,
        ModelCheckpoint(monitor="b").state_key,
        ModelCheckpoint(monitor="a", mode="max").state_key,
        ModelCheckpoint(every_n_train_steps=5).state_key,
        ModelCheckpoint(train_time_interval=timedelta(minutes=5)).state_key,
    }
    assert len(keys) == 5


def test_monitor_never_logged_raises_naming_the_logged_metrics(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")
    trainer = make_trainer(max_epochs=1, callbacks=[checkpoint])
    with pytest.raises(MisconfigurationError, match=r"monitor='val_acc'.*Logged metrics: .*val_loss") as info:
        trainer.fit(tiny_model(), data(), data())
    assert "self.log('val_acc', value)" in str(info.value)
    assert files(tmp_path) == []


def test_monitor_not_logged_yet_at_a_step_save_only_warns(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_train_steps=2, save_top_k=-1)
    trainer = make_trainer(max_epochs=1, callbacks=[checkpoint])
    with pytest.warns(UserWarning, match="Skipping the top-k save until it is logged"):
        trainer.fit(tiny_model(), data(), data())
    assert files(tmp_path) == []  # validation runs only at the end of the epoch, after the last step's save


def test_weights_only_checkpoints(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_weights_only=True)
    make_trainer(max_epochs=1, callbacks=[checkpoint]).fit(tiny_model(), data())

    saved = torch.load(checkpoint.best_model_path, weights_only=True)
    assert "state_dict" in saved
    assert "optimizer_states" not in saved


def test_nothing_is_saved_in_fast_dev_run_or_during_the_sanity_check(
    tmp_path, make_trainer, tiny_model, data, recording_io
):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "dev")
    make_trainer(fast_dev_run=True, callbacks=[checkpoint]).fit(tiny_model(), data(), data())
    assert files(tmp_path / "dev") == []

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "sanity", monitor="val_loss", save_on_train_epoch_end=False)
    make_trainer(max_epochs=1, num_sanity_val_steps=2, callbacks=[checkpoint], plugins=[recording_io]).fit(
        tiny_model(), data(), data()
    )
    assert [os.path.basename(p) for p in recording_io.paths("save")] == ["epoch=0-step=8.ckpt"]


def test_nothing_is_saved_by_validate_or_test(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    trainer = make_trainer(callbacks=[checkpoint])
    model = tiny_model()
    trainer.validate(model, data())
    trainer.test(model, data())
    assert files(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "mean"}, "mode='mean'"),
        ({"save_top_k": -2}, "save_top_k=-2"),
        ({"save_last": "yes"}, "save_last='yes'"),
        ({"every_n_train_steps": -1}, "every_n_train_steps=-1"),
        ({"every_n_train_steps": 5, "every_n_epochs": 2}, "set only one of them"),
        ({"train_time_interval": 60}, r"train_time_interval=60\) is not valid: give a datetime.timedelta.*Hint"),
        ({"train_time_interval": timedelta(0)}, r"train_time_interval=datetime.timedelta\(0\)\) is not valid"),
        ({"train_time_interval": timedelta(minutes=1), "every_n_epochs": 1}, "every_n_epochs=1\\): set only one"),
        ({"train_time_interval": timedelta(minutes=1), "every_n_train_steps": 5}, "every_n_train_steps=5\\): set only"),
    ],
    ids=[
        "mode",
        "top-k",
        "save-last",
        "negative-steps",
        "both-intervals",
        "time-not-timedelta",
        "time-zero",
        "time-and-epochs",
        "time-and-steps",
    ],
)
def test_invalid_arguments_say_what_to_do(kwargs, match):
    with pytest.raises(MisconfigurationError, match=match):
        ModelCheckpoint(**kwargs)


def test_positional_arguments_mean_what_they_mean_in_lightning() -> None:
    # Lightning 2.6: (dirpath, filename, monitor, verbose, save_last, save_top_k, save_on_exception,
    # save_weights_only, mode, auto_insert_metric_name, every_n_train_steps, train_time_interval,
    # every_n_epochs, save_on_train_epoch_end, enable_version_counter)
    every = timedelta(minutes=5)
    checkpoint = ModelCheckpoint(
        "ckpts", "{epoch}", "val_loss", True, "link", 3, True, True, "max", False, None, every, None, False, False
    )
    assert (checkpoint.filename, checkpoint.monitor, checkpoint.verbose, checkpoint.save_last) == (
        "{epoch}",
        "val_loss",
        True,
        "link",
    )
    assert (checkpoint.save_top_k, checkpoint.save_on_exception, checkpoint.save_weights_only) == (3, True, True)
    assert (checkpoint.mode, checkpoint.auto_insert_metric_name, checkpoint._train_time_interval) == (
        "max",
        False,
        every,
    )
    assert (checkpoint._save_on_train_epoch_end, checkpoint._enable_version_counter) == (False, False)


@pytest.mark.parametrize("name", ["verbose", "save_on_exception", "save_weights_only", "enable_version_counter"])
def test_a_switch_that_is_not_a_bool_is_refused_by_name(name: str) -> None:
    with pytest.raises(MisconfigurationError, match=rf"ModelCheckpoint\({name}='False'\): give True or False"):
        ModelCheckpoint(**{name: "False"})


@pytest.mark.parametrize(("kwargs", "shown"), [({"monitor": 5}, "monitor=5"), ({"filename": ""}, "filename=''")])
def test_a_monitor_or_filename_that_is_not_a_string_is_refused(kwargs: dict[str, Any], shown: str) -> None:
    with pytest.raises(MisconfigurationError, match=rf"ModelCheckpoint\({shown}\) is not valid: give a non-empty"):
        ModelCheckpoint(**kwargs)


@pytest.mark.parametrize("dirpath", [5, ["ckpts"]])
def test_a_dirpath_that_is_not_a_path_is_refused_naming_it(dirpath: Any) -> None:
    with pytest.raises(
        MisconfigurationError, match=rf"ModelCheckpoint\(dirpath={re.escape(repr(dirpath))}\) is not valid"
    ):
        ModelCheckpoint(dirpath=dirpath)


def test_to_yaml_writes_the_kept_checkpoints_with_their_scores(tmp_path, make_trainer, tiny_model, data):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="score", save_top_k=2, filename="{epoch}")
    make_trainer(max_epochs=5, callbacks=[checkpoint]).fit(tiny_model(scores=SCORES), data(), data())

    checkpoint.to_yaml()  # by default beside the checkpoints, as Lightning writes it
    checkpoint.to_yaml(tmp_path / "elsewhere" / "best.yaml")

    expected = {str(tmp_path / "ckpts" / f"epoch={e}.ckpt"): SCORES[e] for e in (3, 4)}
    for path in (tmp_path / "ckpts" / "best_k_models.yaml", tmp_path / "elsewhere" / "best.yaml"):
        assert yaml.safe_load(path.read_text()) == expected


def test_to_yaml_before_fit_needs_a_filepath() -> None:
    with pytest.raises(MisconfigurationError, match=r"to_yaml\(\): no filepath given"):
        ModelCheckpoint(monitor="score").to_yaml()


@pytest.mark.parametrize(
    ("kwargs", "every_n_epochs"),
    [({}, 1), ({"every_n_epochs": 3}, 3), ({"every_n_train_steps": 10}, 0), ({"train_time_interval": timedelta(1)}, 0)],
    ids=["default", "given", "by-steps", "by-time"],
)
def test_every_n_epochs_reads_the_schedule_as_in_lightning(kwargs: dict[str, Any], every_n_epochs: int) -> None:
    assert ModelCheckpoint(**kwargs).every_n_epochs == every_n_epochs
