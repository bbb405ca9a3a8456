"""AsyncCheckpointIO: saves return after a copy, writes happen in the background, and nothing is lost.

The wrapped IOs here are real CheckpointIOs writing real files, made slow (they sleep) or
gated (they wait until the test lets them write) to hold a write in flight.
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from torchplug.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from torchplug.io.async_io import CheckpointSaveError

WRITER_THREAD = "torchplug-checkpoint-writer"


class SlowIO(TorchCheckpointIO):
    """TorchCheckpointIO on a slow disk: every save first sleeps; writes are recorded in order, with their end."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.written: list[str] = []
        self.finished: list[float] = []  # time.monotonic() at the end of each write

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        time.sleep(self.delay)
        super().save_checkpoint(checkpoint, path, storage_options)
        self.written.append(Path(path).name)
        self.finished.append(time.monotonic())


class GatedIO(TorchCheckpointIO):
    """TorchCheckpointIO whose saves wait until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.written: list[str] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        super().save_checkpoint(checkpoint, path, storage_options)
        self.written.append(Path(path).name)


class FullDiskIO(TorchCheckpointIO):
    """Every save fails as on a full disk; with ``gate``, only once the gate is open."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.gate = gate

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        if self.gate is not None:
            self.gate.wait(timeout=30)
        raise OSError(28, "No space left on device", path)


def training_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_step(model, optimizer)
    return model, optimizer


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Mutates every parameter, buffer and optimizer state in place, as training does."""
    model(torch.randn(4, 32)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def trainer_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    return {
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
        "global_step": step,
        "loops": {"fit_loop": {"epoch": 1, "batches_seen": [step]}},
        "hyper_parameters": argparse.Namespace(lr=1e-3, layers=[32, 64, 8]),
    }


def assert_same(loaded: Any, expected: Any) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(loaded, torch.Tensor) and loaded.dtype == expected.dtype
        assert torch.equal(loaded, expected)
    elif isinstance(expected, dict):
        assert isinstance(loaded, dict) and list(loaded) == list(expected)
        for key in expected:
            assert_same(loaded[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert type(loaded) is type(expected) and len(loaded) == len(expected)
        for a, b in zip(loaded, expected):
            assert_same(a, b)
    elif isinstance(expected, argparse.Namespace):
        assert vars(loaded) == vars(expected)
    else:
        assert loaded == expected


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WRITER_THREAD]


@pytest.fixture
def io_() -> Any:
    """A list to put AsyncCheckpointIOs in; each is torn down after the test (errors ignored)."""
    made: list[AsyncCheckpointIO] = []
    yield made
    for io in made:
        if io.checkpoint_io is not None and isinstance(io.checkpoint_io, GatedIO):
            io.checkpoint_io.gate.set()
        try:
            io.teardown()
        except CheckpointSaveError:
            pass


def make(io_: list[AsyncCheckpointIO], wrapped: CheckpointIO | None = None, **kwargs: Any) -> AsyncCheckpointIO:
    io = AsyncCheckpointIO(wrapped, **kwargs)
    io_.append(io)
    return io


# -- the basic promise ------------------------------------------------------------------------


def test_save_returns_before_the_write_and_flush_waits_for_it(tmp_path: Path, io_: Any) -> None:
    slow = SlowIO(delay=1.0)
    io = make(io_, slow)
    model, optimizer = training_state()
    checkpoint = trainer_checkpoint(model, optimizer, step=1)
    path = str(tmp_path / "step=1.ckpt")

    io.save_checkpoint(checkpoint, path)
    returned = time.monotonic()
    assert io.exists(path)  # a pending save counts as existing

    io.flush()
    flushed = time.monotonic()
    assert slow.written == ["step=1.ckpt"]
    assert returned < slow.finished[0] - 0.5 and slow.finished[0] <= flushed
    assert_same(TorchCheckpointIO().load_checkpoint(path, weights_only=False), checkpoint)


def test_the_snapshot_is_isolated_from_training_that_goes_on(tmp_path: Path, io_: Any) -> None:
    gated = GatedIO()
    io = make(io_, gated)
    model, optimizer = training_state()
    checkpoint = trainer_checkpoint(model, optimizer, step=1)
    expected = copy.deepcopy(checkpoint)

    io.save_checkpoint(checkpoint, str(tmp_path / "a.ckpt"))
    train_step(model, optimizer)  # parameters, BatchNorm buffers and Adam moments change in place
    checkpoint["loops"]["fit_loop"]["batches_seen"].append(2)
    checkpoint["hyper_parameters"].lr = 0.5
    assert not torch.equal(checkpoint["state_dict"]["0.weight"], expected["state_dict"]["0.weight"])

    gated.gate.set()
    io.flush()
    assert_same(io.load_checkpoint(str(tmp_path / "a.ckpt"), weights_only=False), expected)


def test_repeated_saves_write_each_state_and_reuse_the_staging_memory(tmp_path: Path, io_: Any) -> None:
    io = make(io_, TorchCheckpointIO())
    model, optimizer = training_state()
    staging: list[set[int]] = []
    for step in (1, 2, 3):
        checkpoint = trainer_checkpoint(model, optimizer, step)
        expected = copy.deepcopy(checkpoint)
        io.save_checkpoint(checkpoint, str(tmp_path / f"step={step}.ckpt"))
        train_step(model, optimizer)
        io.flush()
        assert_same(io.load_checkpoint(str(tmp_path / f"step={step}.ckpt"), weights_only=False), expected)
        slots = io._writer.free_slots  # white box: the buffers the next save will copy into
        staging.append({b.data_ptr() for slot in slots for bucket in slot.pool.values() for b in bucket})
    assert staging[0] == staging[1] == staging[2]


def test_the_file_is_what_a_synchronous_save_writes(tmp_path: Path, io_: Any) -> None:
    embedding = torch.nn.Parameter(torch.randn(10, 4))
    base = torch.arange(24.0)
    checkpoint = {
        "tied": {"encoder.weight": embedding, "decoder.weight": embedding.detach()},  # one storage, twice
        "views": [base[2:8], base.view(4, 6).t(), base],  # three views of one storage
        "dtypes": [torch.ones(3, dtype=torch.bfloat16), torch.arange(5), torch.tensor(True), torch.tensor(2.5)],
        "empty": torch.empty(0, 3),
        "sparse": torch.eye(3).to_sparse(),
        "complex": torch.randn(3, dtype=torch.complex64).conj(),
        "tuple": (1, 2.0, "three"),
    }
    TorchCheckpointIO().save_checkpoint(checkpoint, str(tmp_path / "sync.ckpt"))
    io = make(io_, TorchCheckpointIO())
    io.save_checkpoint(checkpoint, str(tmp_path / "async.ckpt"))
    io.flush()

    loaded = io.load_checkpoint(str(tmp_path / "async.ckpt"), weights_only=False)
    assert isinstance(loaded["tied"]["encoder.weight"], torch.nn.Parameter)
    tied = [t.untyped_storage().data_ptr() for t in loaded["tied"].values()]
    views = [t.untyped_storage().data_ptr() for t in loaded["views"]]
    assert tied[0] == tied[1] and views[0] == views[1] == views[2]
    for name in ("dtypes", "empty", "tuple", "views"):
        assert_same(loaded[name], checkpoint[name])
    assert torch.equal(loaded["sparse"].to_dense(), torch.eye(3))
    assert torch.equal(loaded["complex"].resolve_conj(), checkpoint["complex"].resolve_conj())
    assert zip_records(tmp_path / "async.ckpt") == zip_records(tmp_path / "sync.ckpt")


def zip_records(path: Path) -> dict[str, bytes]:
    """The records of a torch.save archive (the pickle and every storage), without the random save id."""
    with zipfile.ZipFile(path) as archive:
        records = {name.split("/", 1)[1]: archive.read(name) for name in archive.namelist()}
    del records[".data/serialization_id"]
    return records


# -- ordering, queue depth and the durability barrier -----------------------------------------


def test_save_save_flush_writes_both_in_order(tmp_path: Path, io_: Any) -> None:
    slow = SlowIO(delay=0.3)
    io = make(io_, slow)  # max_pending=1: one snapshot at a time
    model, optimizer = training_state()
    io.save_checkpoint(trainer_checkpoint(model, optimizer, 1), str(tmp_path / "a.ckpt"))
    io.save_checkpoint(trainer_checkpoint(model, optimizer, 2), str(tmp_path / "b.ckpt"))
    assert slow.written == ["a.ckpt"]  # the second save waited for the first write, then took its buffers
    io.flush()
    assert slow.written == ["a.ckpt", "b.ckpt"]
    steps = [io.load_checkpoint(str(tmp_path / f"{n}.ckpt"), weights_only=False)["global_step"] for n in "ab"]
    assert steps == [1, 2]


def test_a_deeper_queue_lets_a_second_save_return_while_the_first_is_written(tmp_path: Path, io_: Any) -> None:
    gated = GatedIO()
    io = make(io_, gated, max_pending=2)
    io.save_checkpoint({"step": 1}, str(tmp_path / "a.ckpt"))
    io.save_checkpoint({"step": 2}, str(tmp_path / "b.ckpt"))  # returns: the gate is still closed
    assert gated.written == []
    gated.gate.set()
    io.flush()
    assert gated.written == ["a.ckpt", "b.ckpt"]


def test_remove_waits_for_the_pending_write_of_that_path(tmp_path: Path, io_: Any) -> None:
    gated = GatedIO()
    io = make(io_, gated)
    path = str(tmp_path / "last.ckpt")
    io.save_checkpoint({"weights": torch.ones(1000)}, path)
    remover = threading.Thread(target=io.remove_checkpoint, args=(path,))
    remover.start()
    remover.join(timeout=0.3)
    assert remover.is_alive()  # blocked behind the write

    gated.gate.set()
    remover.join(timeout=30)
    assert not remover.is_alive()
    assert gated.written == ["last.ckpt"] and not Path(path).exists()
    assert not io.exists(path)


def test_rotation_removes_the_old_checkpoint_only_once_the_new_one_is_written(tmp_path: Path, io_: Any) -> None:
    gated = GatedIO()
    io = make(io_, gated)
    gated.gate.set()
    io.save_checkpoint({"step": 1}, str(tmp_path / "step=1.ckpt"))
    io.flush()
    gated.gate.clear()
    io.save_checkpoint({"step": 2}, str(tmp_path / "step=2.ckpt"))
    rotation = threading.Thread(target=io.remove_checkpoint, args=(str(tmp_path / "step=1.ckpt"),))
    rotation.start()
    rotation.join(timeout=0.3)
    assert rotation.is_alive() and (tmp_path / "step=1.ckpt").exists()  # the only good checkpoint is kept

    gated.gate.set()
    rotation.join(timeout=30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step=2.ckpt"]


def test_load_flushes_a_pending_save_of_the_same_path(tmp_path: Path, io_: Any) -> None:
    io = make(io_, SlowIO(delay=0.3))
    path = str(tmp_path / "last.ckpt")
    io.save_checkpoint({"step": 1}, path)
    io.flush()
    io.save_checkpoint({"step": 2}, path)
    assert io.load_checkpoint(path) == {"step": 2}


# -- errors ----------------------------------------------------------------------------------


def surface_by_save(io: AsyncCheckpointIO, tmp_path: Path) -> None:
    io.save_checkpoint({"step": 2}, str(tmp_path / "next.ckpt"))


SURFACES = {
    "next-save": surface_by_save,
    "flush": lambda io, tmp_path: io.flush(),
    "remove": lambda io, tmp_path: io.remove_checkpoint(str(tmp_path / "older.ckpt")),
    "teardown": lambda io, tmp_path: io.teardown(),
}


@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_background_error_is_logged_at_once_and_raised_by_the_next_call(
    tmp_path: Path, io_: Any, caplog: pytest.LogCaptureFixture, surface: str
) -> None:
    io = make(io_, FullDiskIO())
    path = str(tmp_path / "step=1.ckpt")
    (tmp_path / "older.ckpt").write_bytes(b"the previous checkpoint")
    with caplog.at_level(logging.ERROR, logger="torchplug"):
        io.save_checkpoint({"step": 1}, path)  # returns: the failure happens in the background
        deadline = time.monotonic() + 30
        while not caplog.records:
            assert time.monotonic() < deadline, "the failure was never logged"
            time.sleep(0.01)
    record = caplog.records[0]
    assert record.levelno == logging.ERROR and path in record.getMessage() and record.exc_info is not None

    message = re.escape(f"Saving the checkpoint to '{path}' in the background failed: OSError")
    with pytest.raises(CheckpointSaveError, match=message) as info:
        SURFACES[surface](io, tmp_path)
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == 28
    assert info.value.paths == [path]
    assert (tmp_path / "older.ckpt").exists()  # rotation did not remove the previous checkpoint
    assert not (tmp_path / "next.ckpt").exists()  # the save that raised was not started
    io.flush()  # reported once: the error is not raised again


def test_several_failures_are_reported_together(tmp_path: Path, io_: Any) -> None:
    gate = threading.Event()  # both saves are queued before the first one fails
    io = make(io_, FullDiskIO(gate), max_pending=2)
    io.save_checkpoint({"step": 1}, str(tmp_path / "a.ckpt"))
    io.save_checkpoint({"step": 2}, str(tmp_path / "b.ckpt"))
    gate.set()
    with pytest.raises(CheckpointSaveError, match=r"1 later save\(s\) failed too: .*b\.ckpt") as info:
        io.flush()
    assert [Path(p).name for p in info.value.paths] == ["a.ckpt", "b.ckpt"]


def test_an_unpicklable_leaf_fails_in_the_background_and_the_io_keeps_working(tmp_path: Path, io_: Any) -> None:
    io = make(io_, TorchCheckpointIO())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the lock cannot be copied either: it is told, then fails to pickle
        io.save_checkpoint({"lock": threading.Lock()}, str(tmp_path / "bad.ckpt"))
    with pytest.raises(CheckpointSaveError, match=r"bad\.ckpt") as info:
        io.flush()
    assert isinstance(info.value.__cause__, TypeError)
    assert [p.name for p in tmp_path.iterdir()] == []  # no partial or temporary file
    io.save_checkpoint({"step": 3}, str(tmp_path / "good.ckpt"))
    io.flush()
    assert io.load_checkpoint(str(tmp_path / "good.ckpt")) == {"step": 3}


class NotCopyable:
    """Pickles, but refuses ``copy.deepcopy`` (as objects holding handles may)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("cannot copy a NotCopyable")


def test_a_leaf_that_cannot_be_copied_is_written_live_and_the_user_is_told(tmp_path: Path, io_: Any) -> None:
    from torchplug.io import _snapshot

    _snapshot._WARNED_SHARED.discard(NotCopyable)
    gated = GatedIO()
    io = make(io_, gated)
    leaf = NotCopyable(1)
    with pytest.warns(UserWarning, match=r"holds a .*NotCopyable that cannot be copied .*written as it is"):
        io.save_checkpoint({"leaf": leaf}, str(tmp_path / "a.ckpt"))
    leaf.value = 2  # before the write: the checkpoint gets this, as the warning said
    gated.gate.set()
    io.flush()
    assert io.load_checkpoint(str(tmp_path / "a.ckpt"), weights_only=False)["leaf"].value == 2


# -- life cycle -------------------------------------------------------------------------------


def test_teardown_stops_the_thread_and_the_io_can_be_used_again(tmp_path: Path, io_: Any) -> None:
    io = make(io_, SlowIO(delay=0.2))
    io.save_checkpoint({"run": 1}, str(tmp_path / "fit.ckpt"))
    io.teardown()  # waits for the write
    assert io.load_checkpoint(str(tmp_path / "fit.ckpt")) == {"run": 1}
    assert writer_threads() == []

    io.save_checkpoint({"run": 2}, str(tmp_path / "validate.ckpt"))  # a later fit/validate with the same IO
    assert len(writer_threads()) == 1
    io.teardown()
    assert io.load_checkpoint(str(tmp_path / "validate.ckpt")) == {"run": 2}
    assert writer_threads() == []


def test_an_io_dropped_without_teardown_finishes_its_writes(tmp_path: Path) -> None:
    io = AsyncCheckpointIO(SlowIO(delay=0.3))
    io.save_checkpoint({"step": 1}, str(tmp_path / "orphan.ckpt"))
    del io
    gc.collect()
    deadline = time.monotonic() + 30
    while writer_threads():
        assert time.monotonic() < deadline, "the writer thread never ended"
        time.sleep(0.01)
    assert TorchCheckpointIO().load_checkpoint(str(tmp_path / "orphan.ckpt")) == {"step": 1}


EXIT_RIGHT_AFTER_SAVE = """
    import sys, time, torch
    from torchplug.io import AsyncCheckpointIO, TorchCheckpointIO

    class SlowIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            time.sleep(1.0)  # the interpreter starts to exit long before this write is done
            super().save_checkpoint(checkpoint, path, storage_options)

    io = AsyncCheckpointIO(SlowIO())
    io.save_checkpoint({"step": 7, "weights": torch.full((25_000_000,), 7.0)}, sys.argv[1])  # 100 MB
    how = sys.argv[2]
    if how == "sys.exit":
        sys.exit(3)
    if how == "del":
        del io
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["end-of-script", "sys.exit", "del"])
def test_a_process_that_exits_right_after_saving_leaves_a_complete_file(tmp_path: Path, how: str) -> None:
    script = tmp_path / "exit_after_save.py"
    script.write_text(textwrap.dedent(EXIT_RIGHT_AFTER_SAVE))
    path = tmp_path / "last.ckpt"
    result = subprocess.run([sys.executable, str(script), str(path), how], capture_output=True, text=True, timeout=120)
    assert result.returncode == (3 if how == "sys.exit" else 0), result.stderr
    loaded = TorchCheckpointIO().load_checkpoint(str(path))
    assert loaded["step"] == 7 and loaded["weights"].numel() == 25_000_000
    assert bool((loaded["weights"] == 7.0).all())


# -- configuration, as the Trainer does it ----------------------------------------------------


def test_the_wrapped_io_is_set_later_or_defaults_to_torch(tmp_path: Path, io_: Any) -> None:
    io = make(io_)
    assert io.checkpoint_io is None  # the Trainer fills this in with its accelerator's default
    io.save_checkpoint({"step": 1}, str(tmp_path / "default.ckpt"))  # used alone: TorchCheckpointIO
    io.flush()
    assert TorchCheckpointIO().load_checkpoint(str(tmp_path / "default.ckpt")) == {"step": 1}

    slow = SlowIO(delay=0.0)
    io.checkpoint_io = slow
    io.save_checkpoint({"step": 2}, str(tmp_path / "set.ckpt"))
    io.flush()
    assert slow.written == ["set.ckpt"]
    assert repr(io) == f"AsyncCheckpointIO(checkpoint_io={slow!r}, max_pending=1)"


def test_misuse_is_refused_with_a_hint() -> None:
    with pytest.raises(TypeError, match=r"cannot wrap another AsyncCheckpointIO.*Hint"):
        AsyncCheckpointIO(AsyncCheckpointIO())
    with pytest.raises(TypeError, match=r"is not a CheckpointIO.*Hint"):
        AsyncCheckpointIO("torch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_pending=0 is not a positive integer"):
        AsyncCheckpointIO(max_pending=0)
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match=rf"copy_threads={bad!r} is not a positive integer.*Hint"):
            AsyncCheckpointIO(copy_threads=bad)  # type: ignore[arg-type]


def test_the_trainer_puts_its_default_io_inside() -> None:
    from torchplug.trainer.connector import resolve

    io = AsyncCheckpointIO()
    resolution = resolve(accelerator="cpu", plugins=[io])
    assert resolution.strategy.checkpoint_io is io
    assert isinstance(io.checkpoint_io, TorchCheckpointIO)


def test_without_generic_events_the_snapshot_waits_through_torch_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchplug.io import _snapshot

    waited: list[torch.device] = []
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("xpu"))
    monkeypatch.setattr(torch.accelerator, "synchronize", waited.append)
    # torch.Event cannot be made for these devices here (a CPU build): the snapshot waits instead.
    assert _snapshot._record_event(torch.device("xpu", 0)) is None
    assert waited == [torch.device("xpu", 0)]
    assert _snapshot._record_event(torch.device("xla", 0)) is None  # not torch's accelerator: nothing to wait on
    assert waited == [torch.device("xpu", 0)]


# -- preparing the staging memory ahead of the first save ----------------------------------------


def test_prepare_allocates_the_staging_buffers_the_first_save_then_uses(tmp_path: Path, io_: Any) -> None:
    from torchplug.io._snapshot import CopyPool, Slot, storages_of

    model, optimizer = training_state()
    checkpoint = trainer_checkpoint(model, optimizer, step=1)
    slot = Slot()
    sources = storages_of(checkpoint)
    slot.reserve(sources)
    reserved = {buffer.data_ptr() for bucket in slot.pool.values() for buffer in bucket}
    assert len(reserved) == len(sources)  # one paged-in buffer per storage, nothing copied yet
    staged = slot.stage(sources, CopyPool(1))
    assert {buffer.data_ptr() for buffer in staged.values()} == reserved  # the first save copies into them

    io = make(io_, TorchCheckpointIO())
    io.prepare(checkpoint)  # in the background
    io.flush()  # waits for the preparation too
    io.save_checkpoint(checkpoint, str(tmp_path / "first.ckpt"))
    expected = copy.deepcopy(checkpoint)
    train_step(model, optimizer)  # the live tensors move on at once
    io.flush()
    assert_same(io.load_checkpoint(str(tmp_path / "first.ckpt"), weights_only=False), expected)


def test_prepare_never_waits_for_a_slot_in_use(tmp_path: Path, io_: Any) -> None:
    gated = GatedIO()
    io = make(io_, gated)
    io.save_checkpoint({"x": torch.ones(4)}, str(tmp_path / "a.ckpt"))  # holds the only slot
    io.prepare({"x": torch.ones(4)})  # returns at once: the slot in use is reused as it is
    gated.gate.set()
    io.flush()
    assert gated.written == ["a.ckpt"]


# -- the copy on several threads -------------------------------------------------------------


def big_checkpoint() -> dict[str, Any]:
    """Past the 8 MB under which the caller copies alone: large tensors, tied weights, views, small leaves."""
    torch.manual_seed(0)
    shared = torch.nn.Parameter(torch.randn(1000, 1000))  # 4 MB, saved twice
    base = torch.randn(3_000_000)  # 12 MB, saved through three views
    return {
        "state_dict": {"encoder.weight": shared, "decoder.weight": shared.detach(), "big": torch.randn(2_500_001)},
        "views": [base[7:1_000_007], base.view(3000, 1000).t(), base],
        "small": [torch.arange(5), torch.tensor(2.5), torch.ones(3, dtype=torch.bfloat16)],
        "step": 7,
    }


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_a_snapshot_copied_by_several_threads_is_the_synchronous_file(tmp_path: Path, io_: Any, threads: int) -> None:
    checkpoint = big_checkpoint()
    TorchCheckpointIO().save_checkpoint(checkpoint, str(tmp_path / "sync.ckpt"))
    gated = GatedIO()
    io = make(io_, gated, copy_threads=threads)
    io.save_checkpoint(checkpoint, str(tmp_path / "async.ckpt"))
    copiers = [t for t in threading.enumerate() if t.name.startswith("torchplug-checkpoint-copy")]
    assert 1 <= len(copiers) <= threads - 1  # the caller copied a share itself
    with torch.no_grad():  # training goes on before the write: the snapshot must not see it
        for tensor in (
            checkpoint["state_dict"]["encoder.weight"],
            checkpoint["state_dict"]["big"],
            checkpoint["views"][2],
        ):
            tensor.add_(1.0)
    gated.gate.set()
    io.flush()
    with torch.no_grad():
        for tensor in (
            checkpoint["state_dict"]["encoder.weight"],
            checkpoint["state_dict"]["big"],
            checkpoint["views"][2],
        ):
            tensor.sub_(1.0)
    assert zip_records(tmp_path / "async.ckpt") == zip_records(tmp_path / "sync.ckpt")
    io.teardown()
    assert not [t for t in threading.enumerate() if t.name.startswith("torchplug-checkpoint-copy")]
    assert "copy_threads=" + str(threads) in repr(io)


def test_the_shares_of_a_parallel_copy_cover_every_byte_once() -> None:
    from torchplug.io._snapshot import _split

    sizes = [5, 1, 17, 3, 40, 2]
    sources = [torch.arange(n, dtype=torch.uint8) for n in sizes]
    pairs = [(torch.empty_like(s), s) for s in sources]
    for parts in (1, 2, 3, 4, 7, 68, 100):
        shares = _split(pairs, sum(sizes), parts)
        assert len(shares) <= parts
        share = -(-sum(sizes) // parts)
        assert all(sum(source.numel() for _, source in items) <= share for items in shares)
        covered = [0] * len(sizes)
        for items in shares:
            for buffer, source in items:
                index = next(
                    i
                    for i, s in enumerate(sources)
                    if s.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
                )
                assert buffer.untyped_storage().data_ptr() == pairs[index][0].untyped_storage().data_ptr()
                assert buffer.storage_offset() == source.storage_offset() and buffer.numel() == source.numel()
                covered[index] += source.numel()
        assert covered == sizes


def test_a_copy_that_fails_on_another_thread_is_raised_once_every_thread_is_done() -> None:
    from torchplug.io._snapshot import CopyPool

    pool = CopyPool(3)
    good = torch.zeros(8 << 20, dtype=torch.uint8)
    refused = torch.zeros(1000, requires_grad=True)  # an in-place copy into it raises, on the last share's thread
    try:
        with pytest.raises(RuntimeError, match="in-place"):
            pool.copy([(torch.empty_like(good), good), (refused, torch.ones(1000))])
    finally:
        pool.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("torchplug-checkpoint-copy")]


def test_by_default_one_copy_thread_per_cpu_that_torch_leaves_free(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from torchplug.io._snapshot import default_copy_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    for torch_threads, expected in ((1, 4), (2, 2), (3, 1), (4, 1), (8, 1)):
        monkeypatch.setattr(torch, "get_num_threads", lambda n=torch_threads: n)
        assert default_copy_threads() == expected
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert default_copy_threads() == 8  # past a few threads the memory bandwidth is spent anyway
