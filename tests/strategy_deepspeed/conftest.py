"""Fixtures for strategy-deepspeed's tests: real DeepSpeed runs over 2 CPU processes (gloo), and no deepspeed at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.strategies.runner import Run, environment, run

SCRIPT = Path(__file__).parent / "scripts" / "train.py"

#: DeepSpeed compiles its shared-memory communication op the first time a process group starts on the
#: CPU (about 100 s on 2 cores; cached under ~/.cache/torch_extensions after that).
BUILD_TIMEOUT = 900.0


def train(out: Path, *args: str, timeout: float = 300.0) -> Run:
    """``python scripts/train.py --out OUT ARGS`` (it re-runs itself for rank 1); output in ``OUT/output.log``."""
    out.mkdir(parents=True, exist_ok=True)
    return run([sys.executable, str(SCRIPT), "--out", str(out), *args], out / "output.log", timeout)


@pytest.fixture(scope="session")
def deepspeed_ops() -> None:
    """DeepSpeed's CPU communication op, built once before the timed runs (a no-op when already cached)."""
    code = (
        "import os; os.environ['DS_ACCELERATOR'] = 'cpu'\n"
        "from deepspeed.comm.torch import build_shm_op\n"
        "build_shm_op()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def no_deepspeed(monkeypatch: pytest.MonkeyPatch) -> None:
    """deepspeed cannot be imported: ``import deepspeed`` raises ModuleNotFoundError, as when it is not installed."""
    for name in [m for m in sys.modules if m == "deepspeed" or m.startswith("deepspeed.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # type: ignore[arg-type]
