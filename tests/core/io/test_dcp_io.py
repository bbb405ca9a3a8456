"""DistributedCheckpointIO (``dcp``, ``dcp_async``) in one process, on real filesystems: local, ``memory://``, ``file://``.

The multi-process behaviour (every rank writing its shards, resharding, resuming) is in
``tests/core/strategies/test_sharded_checkpoints.py`` and ``test_elastic.py``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from tests.checkpoint_io_support import listing
from tests.core.trainer.models import BlobData, Classifier, quiet, weights
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

import torchplug
from torchplug import MisconfigurationError
from torchplug.callbacks.model_checkpoint import ModelCheckpoint
from torchplug.io import AsyncCheckpointIO, DistributedCheckpointIO, TorchCheckpointIO
from torchplug.io.async_io import CheckpointSaveError
from torchplug.strategies.fsdp import FSDPStrategy


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(4, 8)).square().mean().backward()
    optimizer.step()
    return model, optimizer


def checkpoint_of(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int = 1) -> dict[str, Any]:
    """What the Trainer hands a collective IO in one process (DCP's form of the model and optimizer)."""
    return {
        "epoch": 0,
        "global_step": step,
        "state_dict": get_model_state_dict(model),
        "optimizer_states": [get_optimizer_state_dict(model, optimizer)],
        "loops": {"fit": {"batches_done": step, "by_index": {0: "int keys survive"}}},
        "callbacks": {"ModelCheckpoint{'monitor': None}": {"best_model_score": torch.tensor(0.25)}},
        "rng": {"global": {"torch": torch.get_rng_state()}},
        "extra": torch.arange(4, dtype=torch.bfloat16),
    }


def fresh_target() -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = {
        "state_dict": get_model_state_dict(model),
        "optimizer_states": [get_optimizer_state_dict(model, optimizer)],
    }
    return model, optimizer, target


def equal(actual: Any, expected: Any) -> bool:
    if isinstance(expected, torch.Tensor):
        return isinstance(actual, torch.Tensor) and actual.dtype == expected.dtype and torch.equal(actual, expected)
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(equal(actual[k], expected[k]) for k in expected)
        )
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(equal(a, b) for a, b in zip(actual, expected))
    return bool(actual == expected)


def test_the_names_are_registered_and_collective() -> None:
    registry = torchplug.CheckpointIORegistry
    sync, background = registry.resolve("dcp").create(), registry.resolve("dcp_async").create()
    assert isinstance(sync, DistributedCheckpointIO) and not sync.async_save
    assert isinstance(background, DistributedCheckpointIO) and background.async_save
    assert DistributedCheckpointIO.collective and not TorchCheckpointIO.collective
    background.teardown()


def test_round_trip_on_every_filesystem(root: str) -> None:
    model, optimizer = trained()
    checkpoint = checkpoint_of(model, optimizer)
    io = DistributedCheckpointIO()
    path = f"{root}/epoch=0-step=1.ckpt"
    io.save_checkpoint(checkpoint, path)
    assert io.exists(path) and listing(root) == ["epoch=0-step=1.ckpt"]  # nothing hidden left beside it
    loaded = io.load_checkpoint(path)
    assert equal(loaded, checkpoint)  # int keys, bfloat16, the optimizer's step: all as written
    # Read in place into another model and optimizer (what resuming does).
    other, other_optimizer, target = fresh_target()
    restored = io.load_distributed(path, target)
    assert equal(other.state_dict(), model.state_dict())
    assert equal(get_optimizer_state_dict(other, other_optimizer), checkpoint["optimizer_states"][0])
    assert restored["global_step"] == 1 and equal(restored["rng"], checkpoint["rng"])


def test_saving_again_replaces_the_whole_directory_and_leaves_nothing_behind(root: str) -> None:
    model, optimizer = trained()
    io = DistributedCheckpointIO()
    path = f"{root}/last.ckpt"
    io.save_checkpoint(checkpoint_of(model, optimizer, step=1), path)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    io.save_checkpoint(checkpoint_of(model, optimizer, step=2), path)
    loaded = io.load_checkpoint(path)
    assert loaded["global_step"] == 2 and torch.equal(loaded["state_dict"]["0.weight"], model[0].weight)
    io.flush()  # the replaced directory is deleted in the background
    assert listing(root) == ["last.ckpt"]


def test_remove_deletes_the_whole_directory(root: str) -> None:
    model, optimizer = trained()
    io = DistributedCheckpointIO()
    path = f"{root}/old.ckpt"
    io.save_checkpoint(checkpoint_of(model, optimizer), path)
    io.remove_checkpoint(path)
    assert not io.exists(path) and listing(root) == []
    io.remove_checkpoint(path)  # already gone: no error


def test_a_directory_without_its_metadata_is_no_checkpoint(root: str) -> None:
    model, optimizer = trained()
    io = DistributedCheckpointIO()
    path = f"{root}/last.ckpt"
    io.save_checkpoint(checkpoint_of(model, optimizer), path)
    fs, fs_path = fsspec.core.url_to_fs(path)
    fs.rm(f"{fs_path}/.metadata")  # as if the save had stopped before its coordinator finished
    assert not io.exists(path)
    with pytest.raises(torchplug.CheckpointLoadError, match=r"is a directory without \.metadata"):
        io.load_checkpoint(path)
    assert ModelCheckpoint(dirpath=root).find_last_checkpoint(io) is None  # ckpt_path="last" never picks it
    assert ModelCheckpoint(dirpath=root).complete_checkpoints(io) == []


def test_an_ordinary_checkpoint_file_is_read_too(tmp_path: Path) -> None:
    model, _ = trained()
    TorchCheckpointIO().save_checkpoint({"state_dict": model.state_dict(), "global_step": 3}, str(tmp_path / "a.ckpt"))
    io = DistributedCheckpointIO()
    assert io.exists(str(tmp_path / "a.ckpt"))
    assert io.load_checkpoint(str(tmp_path / "a.ckpt"))["global_step"] == 3
    _, _, target = fresh_target()
    assert io.load_distributed(str(tmp_path / "a.ckpt"), target)["global_step"] == 3  # whole, for the strategy


def test_weights_only_refuses_other_objects_unless_trusted(tmp_path: Path) -> None:
    model, optimizer = trained()
    checkpoint = {**checkpoint_of(model, optimizer), "hyper_parameters": argparse.Namespace(lr=0.1)}
    io = DistributedCheckpointIO()
    io.save_checkpoint(checkpoint, str(tmp_path / "c.ckpt"))
    with pytest.raises(Exception, match="Weights only load failed"):
        io.load_checkpoint(str(tmp_path / "c.ckpt"))
    assert io.load_checkpoint(str(tmp_path / "c.ckpt"), weights_only=False)["hyper_parameters"].lr == 0.1


def test_arguments_it_cannot_honour_are_refused(tmp_path: Path) -> None:
    model, optimizer = trained()
    io = DistributedCheckpointIO()
    with pytest.raises(TypeError, match=r"storage_options='x' is not a dict"):
        io.save_checkpoint(checkpoint_of(model, optimizer), str(tmp_path / "c.ckpt"), storage_options="x")
    with pytest.raises(TypeError, match=r"storage_options: 'region' is not an option of LocalFileSystem .*auto_mkdir"):
        io.save_checkpoint(checkpoint_of(model, optimizer), str(tmp_path / "c.ckpt"), storage_options={"region": "x"})
    io.save_checkpoint(checkpoint_of(model, optimizer), str(tmp_path / "c.ckpt"))
    with pytest.raises(TypeError, match=r"map_location=.*give None, 'cpu' or a torch.device"):
        io.load_checkpoint(str(tmp_path / "c.ckpt"), map_location=lambda storage, loc: storage)
    with pytest.raises(ValueError, match=r"executor='gpu' is not one of"):
        DistributedCheckpointIO(executor="gpu")
    with pytest.raises(TypeError, match=r"AsyncCheckpointIO cannot wrap .*collective.*dcp_async"):
        AsyncCheckpointIO(DistributedCheckpointIO())


def test_asynchronous_saves_finish_in_the_background(root: str) -> None:
    model, optimizer = trained()
    io = DistributedCheckpointIO(async_save=True)
    try:
        path = f"{root}/last.ckpt"
        io.prepare(checkpoint_of(model, optimizer))  # staging memory, ahead of the first save
        io.save_checkpoint(checkpoint_of(model, optimizer, step=1), path)
        expected = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            model[0].weight.add_(1.0)  # training goes on at once: the save holds a copy
        assert io.exists(path)  # pending counts (as for the async IO)
        io.flush()  # the durability barrier
        assert listing(root) == ["last.ckpt"]
        loaded = io.load_checkpoint(path)
        assert loaded["global_step"] == 1 and equal(loaded["state_dict"], expected)
        io.save_checkpoint(checkpoint_of(model, optimizer, step=2), path)  # the next save reuses the staging
        assert io.load_checkpoint(path)["global_step"] == 2  # loading waits for the pending save
    finally:
        io.teardown()


def test_an_asynchronous_save_copies_on_several_threads_into_reused_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchplug.io import _snapshot

    monkeypatch.setattr(_snapshot, "default_copy_threads", lambda: 3)
    monkeypatch.setattr(_snapshot, "PARALLEL_COPY_MIN_BYTES", 0)  # the test's model is small
    shares: list[int] = []
    split = _snapshot._split
    monkeypatch.setattr(_snapshot, "_split", lambda *args: shares.append(args[2]) or split(*args))
    model, optimizer = trained()
    io = DistributedCheckpointIO(async_save=True, executor="thread")
    try:
        io.save_checkpoint(checkpoint_of(model, optimizer, step=1), str(tmp_path / "a.ckpt"))
        expected = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            model[0].weight.add_(1.0)  # the save holds its own copy
        io.flush()
        buffers = [b.data_ptr() for bucket in io._background.stager.slot.pool.values() for b in bucket]  # type: ignore[union-attr]
        io.save_checkpoint(checkpoint_of(model, optimizer, step=2), str(tmp_path / "b.ckpt"))
        io.flush()
        again = [b.data_ptr() for bucket in io._background.stager.slot.pool.values() for b in bucket]  # type: ignore[union-attr]
    finally:
        io.teardown()
    assert shares == [3, 3]  # both copies split over 3 threads
    assert sorted(again) == sorted(buffers)  # the second save reused the first one's buffers
    assert equal(DistributedCheckpointIO().load_checkpoint(str(tmp_path / "a.ckpt"))["state_dict"], expected)


def test_a_failed_background_save_is_raised_on_the_training_thread(tmp_path: Path) -> None:
    model, optimizer = trained()
    (tmp_path / "blocker").write_text("a file where a directory should go")
    io = DistributedCheckpointIO(async_save=True)
    try:
        io.save_checkpoint(checkpoint_of(model, optimizer), str(tmp_path / "blocker" / "last.ckpt"))
        with pytest.raises(CheckpointSaveError, match=r"Saving the sharded checkpoint .*blocker/last\.ckpt") as info:
            io.flush()
        assert info.value.paths == [str(tmp_path / "blocker" / "last.ckpt")]
        io.flush()  # reported once
        io.save_checkpoint(checkpoint_of(model, optimizer), str(tmp_path / "ok.ckpt"))  # still usable
        io.flush()
        assert io.exists(str(tmp_path / "ok.ckpt"))
    finally:
        io.teardown()


_SAVE_LOOP = """
import sys, torch
from torchplug.io import DistributedCheckpointIO

path = sys.argv[1]
io = DistributedCheckpointIO(fsync=False)
for step in range(1, 10_000):
    # 3 x 48 MB, every element equal to the step: a torn checkpoint would mix values
    weights = {str(i): torch.full((12_000_000,), float(step)) for i in range(3)}
    io.save_checkpoint({"global_step": step, "state_dict": weights}, path)
    print(step, flush=True)
"""


def test_a_save_killed_midway_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(_SAVE_LOOP))
    target = tmp_path / "ckpts" / "last.ckpt"
    proc = subprocess.Popen([sys.executable, str(script), str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "1"

        def writing() -> bool:  # a later save has begun filling its hidden directory
            return any(
                p.stat().st_size > 20_000_000 for d in target.parent.glob(".last.ckpt.tmp-*") for p in d.iterdir()
            )

        deadline = time.monotonic() + 120
        while not writing():
            assert time.monotonic() < deadline, "the next save never started writing"
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    io = DistributedCheckpointIO()
    assert io.exists(str(target))
    loaded = io.load_checkpoint(str(target))
    step = float(loaded["global_step"])
    assert all(bool((t == step).all()) for t in loaded["state_dict"].values())
    others = [p.name for p in target.parent.iterdir() if p.name != "last.ckpt"]
    assert all(name.startswith(".last.ckpt.tmp-") for name in others)  # hidden, never under the final name
    assert ModelCheckpoint(dirpath=str(target.parent)).complete_checkpoints(io) == [str(target)]


# -- through the Trainer, in one process --------------------------------------------------------


class Crash(torchplug.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise KeyboardInterrupt("crash")


def fit(root: Path, *callbacks: Any, ckpt_path: str | None = None, **kwargs: Any) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Classifier()
    torch.manual_seed(1234)
    checkpoint = ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=5, save_top_k=2, save_last=True)
    trainer = torchplug.Trainer(
        **quiet(max_epochs=3, enable_checkpointing=True, callbacks=[checkpoint, *callbacks], **kwargs)
    )
    trainer.fit(model, datamodule=BlobData(), ckpt_path=ckpt_path)
    return weights(model)


@pytest.mark.parametrize("io", ["dcp", "dcp_async"])
def test_one_process_with_sharded_checkpoints_resumes_exactly(tmp_path: Path, io: str) -> None:
    reference = fit(tmp_path / "reference")
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path / "run", Crash(step=23), plugins=[io])
    ckpts = tmp_path / "run" / "ckpts"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=0-step=15.ckpt", "epoch=1-step=20.ckpt", "last.ckpt"]
    assert all((p / ".metadata").is_file() for p in ckpts.iterdir())  # directories, rotated whole
    resumed = fit(tmp_path / "run", ckpt_path="last", plugins=[io])
    assert equal(resumed, reference)
    model = Classifier.load_from_checkpoint(str(ckpts / "last.ckpt"))  # a directory reads as a file does
    assert equal(weights(model), resumed)


def test_one_process_resumes_from_a_sharded_checkpoint_with_the_default_io(tmp_path: Path) -> None:
    reference = fit(tmp_path / "reference")
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path / "run", Crash(step=12), plugins=["dcp"])
    # No plugins=["dcp"] now: the directory is recognised and read all the same.
    resumed = fit(tmp_path / "other", ckpt_path=str(tmp_path / "run" / "ckpts" / "epoch=0-step=10.ckpt"))
    assert equal(resumed, reference)


def test_fsdp_state_dict_type_and_the_checkpoint_io_must_agree() -> None:
    sharded = torchplug.Trainer(**quiet(devices=2, strategy=FSDPStrategy(state_dict_type="sharded")))
    assert isinstance(sharded.strategy.checkpoint_io, DistributedCheckpointIO)
    assert "checkpoint_io        dcp  (default of FSDPStrategy" in sharded.describe()
    full = torchplug.Trainer(**quiet(devices=2, strategy=FSDPStrategy()))
    assert isinstance(full.strategy.checkpoint_io, TorchCheckpointIO)
    with pytest.raises(MisconfigurationError, match=r"state_dict_type='sharded'\) has every process write its shards"):
        torchplug.Trainer(**quiet(devices=2, strategy=FSDPStrategy(state_dict_type="sharded"), plugins=["torch"]))
    with pytest.raises(MisconfigurationError, match=r"state_dict_type='full'\) gathers the whole state on rank 0"):
        torchplug.Trainer(**quiet(devices=2, strategy=FSDPStrategy(), plugins=["dcp"]))
    with pytest.raises(MisconfigurationError, match=r"state_dict_type='partial'\): choose 'full'"):
        FSDPStrategy(state_dict_type="partial")
    async_sharded = torchplug.Trainer(
        **quiet(devices=2, strategy=FSDPStrategy(state_dict_type="sharded"), plugins=["dcp_async"])
    )
    assert repr(async_sharded.strategy.checkpoint_io) == (
        "DistributedCheckpointIO(async_save=True, executor='auto', fsync=True)"
    )
