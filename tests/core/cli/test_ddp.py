"""``core fit`` over two real DDP processes: the ``ddp`` strategy re-launches the command for rank 1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.core.cli.conftest import CORE_SCRIPT, TINY, CoreProcess, needs_core_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DDP re-launch is tested on Linux"),
]

#: How the command is started: the console script pip installs, or ``python -m torchplug``.
PROGRAMS = {
    "core-script": pytest.param((str(CORE_SCRIPT),), marks=needs_core_script),
    "python-m": pytest.param(("-m", "torchplug")),
}


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_fit_over_two_ddp_processes(core_process: CoreProcess, tmp_path: Path, program: tuple[str, ...]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"""
trainer:
  devices: 2
  strategy: ddp
  max_epochs: 2
  enable_progress_bar: false
  default_root_dir: {tmp_path}
model: {TINY}.TinyModel
data: {TINY}.TinyData
""")
    result = core_process("fit", "--config", config, "--seed_everything=true", program=program)
    assert result.code == 0, result
    # 64 samples, 32 per rank in batches of 16: 2 steps per epoch (4 in one process); one summary, from rank 0.
    assert result.out.count("fit: 2 epoch(s), 4 step(s)") == 1, result
    (version,) = tmp_path.glob("torchplug_logs/version_*")
    assert (version / "config.yaml").is_file()
    (checkpoint,) = version.glob("checkpoints/*.ckpt")
    state = torch.load(checkpoint, weights_only=True)
    assert state["global_step"] == 4
