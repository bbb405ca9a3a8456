"""When a checkpoint cannot be read or written: errors that name the path and the cause, and nothing left behind.

* Loading a file that is empty, truncated, a directory, or not a checkpoint raises
  :class:`~torchplug.CheckpointLoadError` naming the path and what is wrong with the file, never
  torch's advice to retry with ``weights_only=False``.
* A save that fills the disk says "No space left on device" with the path, and the previous
  checkpoint stays intact (a real, tiny tmpfs in a private mount namespace).
* The temporary file of a writer that was killed is removed by the next save or load in its
  directory; the temporary files of live writers and of other hosts are left alone.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tests.checkpoint_io_support import kill_while_writing

import torchplug
from torchplug.io import TorchCheckpointIO


def _good(path: Path) -> bytes:
    TorchCheckpointIO().save_checkpoint({"weights": torch.randn(256, 256), "step": 3}, str(path))
    return path.read_bytes()


BAD_FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (lambda p: p.write_bytes(b""), "the file is empty (0 bytes)"),
    "truncated": (
        lambda p: p.write_bytes(_good(p)[:100_000]),
        "truncated: the file is 100,000 bytes and its end (the archive's directory) is missing",
    ),
    "text": (lambda p: p.write_text("step,loss\n1,0.5\n"), "is not a checkpoint (it starts b'step')"),
    "plain-pickle": (lambda p: p.write_bytes(pickle.dumps({"a": 1})), "is a plain pickle, not a torch checkpoint"),
    "directory": (lambda p: p.mkdir(), "it is a directory, not a checkpoint file"),
    "a-tensor": (lambda p: torch.save(torch.ones(3), p), "it holds a Tensor, not a checkpoint"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_file_that_is_not_a_whole_checkpoint_is_named_with_the_cause(tmp_path: Path, kind: str) -> None:
    make, cause = BAD_FILES[kind]
    path = tmp_path / "epoch=3.ckpt"
    make(path)
    with pytest.raises(torchplug.CheckpointLoadError) as info:
        TorchCheckpointIO().load_checkpoint(str(path))
    message = str(info.value)
    assert message.startswith(f"Cannot load the checkpoint {path}: ")
    assert cause in message
    assert "weights_only=False" not in message


def test_fit_from_a_truncated_checkpoint_names_it(tmp_path: Path) -> None:
    from tests.core.trainer.models import BlobData, Classifier, quiet

    path = tmp_path / "last.ckpt"
    BAD_FILES["truncated"][0](path)
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    with pytest.raises(torchplug.CheckpointLoadError, match=f"Cannot load the checkpoint {path}: truncated: the file"):
        trainer.fit(Classifier(), datamodule=BlobData(), ckpt_path=str(path))


# -- a full disk --------------------------------------------------------------------------------------

_FILL_DISK = """
import os, sys, torch
from torchplug.io import TorchCheckpointIO

root = sys.argv[1]
io = TorchCheckpointIO()
io.save_checkpoint({"weights": torch.ones(100_000)}, f"{root}/last.ckpt")  # 400 kB of a 1 MB disk
try:
    io.save_checkpoint({"weights": torch.ones(400_000)}, f"{root}/last.ckpt")  # 1.6 MB: cannot fit
except OSError as exc:
    print("ERROR", exc.errno, exc)
print("FILES", sorted(os.listdir(root)))
print("STEP-ONE-INTACT", bool(io.load_checkpoint(f"{root}/last.ckpt")["weights"].numel() == 100_000))
"""


def _private_tmpfs_command(mountpoint: Path) -> list[str]:
    """A shell prefix that mounts a 1 MB tmpfs on ``mountpoint`` in a mount namespace of its own."""
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux and unshare(1) for a private tmpfs")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {mountpoint}"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.decode().strip()}")
    return ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=1m tmpfs {mountpoint} && exec "$0" "$@"']


def test_a_full_disk_says_no_space_left_with_the_path_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(_FILL_DISK))
    result = subprocess.run(
        [*_private_tmpfs_command(disk), sys.executable, str(script), str(disk)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    error = next(line for line in result.stdout.splitlines() if line.startswith("ERROR"))
    assert error.startswith("ERROR 28 [Errno 28] No space left on device: saving the checkpoint to ")
    assert f"{disk}/last.ckpt" in error and "any earlier checkpoint there is intact" in error
    assert "FILES ['last.ckpt']" in result.stdout  # the temporary file was removed
    assert "STEP-ONE-INTACT True" in result.stdout


# -- temporary files of killed writers ----------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_next_save_removes_the_temporaries_of_dead_writers_only(tmp_path: Path) -> None:
    host, dead = socket.gethostname(), _dead_pid()
    stale = [f".last.ckpt.tmp-{host}-{dead}-0123abcd", f".epoch=1.ckpt.tmp-{dead}-89abcdef"]  # today's and older names
    kept = [
        f".last.ckpt.tmp-{host}-{os.getpid()}-0123abcd",  # a live writer (this process)
        f".last.ckpt.tmp-some-other-host-{dead}-0123abcd",  # another host on a shared filesystem
        ".notes.tmp",  # not one of ours
    ]
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"x" * 100)
    TorchCheckpointIO().save_checkpoint({"step": 1}, str(tmp_path / "last.ckpt"))
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, "last.ckpt"])


def test_loading_a_checkpoint_removes_the_temporaries_of_dead_writers_beside_it(tmp_path: Path) -> None:
    TorchCheckpointIO().save_checkpoint({"step": 1}, str(tmp_path / "last.ckpt"))
    stale = tmp_path / f".last.ckpt.tmp-{socket.gethostname()}-{_dead_pid()}-0123abcd"
    stale.write_bytes(b"x" * 100)
    TorchCheckpointIO().load_checkpoint(str(tmp_path / "last.ckpt"))
    assert os.listdir(tmp_path) == ["last.ckpt"]


@pytest.mark.slow
def test_after_a_kill_mid_save_the_next_save_leaves_no_temporary(tmp_path: Path) -> None:
    _, _, leftovers = kill_while_writing(
        tmp_path, 32 * 2**20, imports="from torchplug.io import TorchCheckpointIO", io="TorchCheckpointIO()"
    )
    assert leftovers, "the kill should have left the half-written temporary file"
    TorchCheckpointIO().save_checkpoint({"step": "resumed"}, str(tmp_path / "ckpt" / "last.ckpt"))
    assert os.listdir(tmp_path / "ckpt") == ["last.ckpt"]
