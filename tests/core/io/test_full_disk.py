"""A full disk is said as a full disk by every checkpoint IO, with the path, and leaves nothing behind.

Each IO saves a small checkpoint on a real 1 MB tmpfs (in a private mount namespace), then one that
cannot fit: the error says "No space left on device" with the path, no temporary file or directory
stays, and the previous checkpoint loads whole. ``dcp`` used to give torch's "unexpected pos 704 vs
598" and leave a hidden directory; ``dcp_async`` only "CheckpointException ranks:dict_keys([0])".
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.core.io.test_torch_io_failures import _private_tmpfs_command

_FILL = """
import os, sys, torch
from torchplug.io import AsyncCheckpointIO, TorchCheckpointIO
from torchplug.io.dcp_io import DistributedCheckpointIO

root, kind = sys.argv[1], sys.argv[2]
make = {
    "torch": TorchCheckpointIO,
    "async": lambda: AsyncCheckpointIO(TorchCheckpointIO()),
    "dcp": DistributedCheckpointIO,
    "dcp_async": lambda: DistributedCheckpointIO(async_save=True),
}
io = make[kind]()

def checkpoint(n):
    return {"state_dict": {"w": torch.ones(n)}, "optimizer_states": [], "global_step": n}

io.save_checkpoint(checkpoint(50_000), f"{root}/last.ckpt")  # 200 kB of a 1 MB disk
io.flush()
try:
    io.save_checkpoint(checkpoint(400_000), f"{root}/last.ckpt")  # 1.6 MB: cannot fit
    io.flush()
except Exception as exc:
    print("ERROR", str(exc).replace(chr(10), " "))
print("FILES", sorted(os.listdir(root)))
print("PREVIOUS-INTACT", int(io.load_checkpoint(f"{root}/last.ckpt")["global_step"]) == 50_000)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torch", "async", "dcp", "dcp_async"])
def test_a_full_disk_is_named_for_every_io_and_leaves_nothing_behind(tmp_path: Path, kind: str) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(_FILL))
    result = subprocess.run(
        [*_private_tmpfs_command(disk), sys.executable, str(script), str(disk), kind],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    error = next((line for line in result.stdout.splitlines() if line.startswith("ERROR")), "")
    assert "No space left on device: saving the " in error and f"{disk}/last.ckpt" in error, result.stdout
    assert "intact" in error and "unexpected pos" not in error.split("No space left")[0]
    assert "FILES ['last.ckpt']" in result.stdout, result.stdout  # no temporary file or directory
    assert "PREVIOUS-INTACT True" in result.stdout
