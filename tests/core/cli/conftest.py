"""Running the ``core`` command in this process (fast), or as a real process (exit codes and stderr as users see)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from torchplug.cli import main

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
TINY: Final = "tests.core.cli.tiny"
#: The ``core`` console script installed beside this Python (pip writes it there).
CORE_SCRIPT: Final = Path(sys.executable).parent / "core"
needs_core_script = pytest.mark.skipif(not CORE_SCRIPT.is_file(), reason=f"no core console script at {CORE_SCRIPT}")


@dataclass(frozen=True)
class Outcome:
    """Exit code and output of one command."""

    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit code {self.code}\n--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}"


Core = Callable[..., Outcome]
CoreProcess = Callable[..., Outcome]


@pytest.fixture(autouse=True)
def _no_exported_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--seed_everything`` exports the seed; every test starts (and ends) without one."""
    monkeypatch.delenv("TORCHPLUG_GLOBAL_SEED", raising=False)
    monkeypatch.delenv("TORCHPLUG_SEED_WORKERS", raising=False)


@pytest.fixture
def core(capsys: pytest.CaptureFixture[str]) -> Core:
    """``core(*args)``: run the ``core`` command in this process and capture its output."""

    def run(*args: str) -> Outcome:
        code = main(list(args))
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


def cli_env(**overrides: str) -> dict[str, str]:
    """This process's environment, without an exported seed, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHPLUG_GLOBAL_SEED", "TORCHPLUG_SEED_WORKERS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(overrides)
    return env


@pytest.fixture
def core_process() -> CoreProcess:
    """``core_process(*args, cwd=...)``: run ``python -m torchplug ARGS`` as a real process."""

    def run(*args: str | Path, cwd: Path = REPO_ROOT, timeout: float = 300, program: tuple[str, ...] = ()) -> Outcome:
        command = [sys.executable, *(program or ("-m", "torchplug")), *map(str, args)]
        proc = subprocess.run(
            command, cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        return Outcome(proc.returncode, proc.stdout, proc.stderr)

    return run
