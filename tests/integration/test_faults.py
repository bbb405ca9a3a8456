"""Soak: a training run killed with SIGKILL at random moments of its checkpoint saves, and resumed each time.

For each checkpoint IO (``torch``, ``async``), :data:`KILLS` runs of ``scripts/fault_train.py`` are
each killed in the middle of one of their first saves (the save and the moment within it drawn at
random, with a seed printed for replay); each run resumes from ``last.ckpt``. Then a last run trains
to the end. What a user relies on:

* nothing is lost: ``last.ckpt`` always loads, and never goes back in steps;
* no temporary file is left in the checkpoint folder;
* ``save_top_k=2`` holds: two checkpoints and ``last.ckpt``, no ``-v1`` copies;
* the final weights equal, bit for bit, those of a run that was never interrupted.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL timing measured on Linux"),
]

SCRIPT = Path(__file__).parent / "scripts" / "fault_train.py"
KILLS = 20
MAX_STEPS = 48
#: Seconds a run may take (a Python and torch start, at most 48 steps with a save each, on a busy machine).
RUN_TIMEOUT = 300


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def command(root: Path, io: str) -> list[str]:
    return [sys.executable, str(SCRIPT), str(root), io, str(MAX_STEPS)]


def temporaries(ckpts: Path) -> list[str]:
    try:
        return [name for name in os.listdir(ckpts) if ".tmp-" in name]
    except FileNotFoundError:
        return []


def last_step(ckpts: Path) -> int:
    path = ckpts / "last.ckpt"
    return int(torch.load(path, weights_only=True)["global_step"]) if path.exists() else 0


def kill_during_a_save(root: Path, io: str, rng: random.Random) -> str:
    """Start a run and SIGKILL it in the middle of its n-th save (n drawn at random), after a random delay."""
    ckpts = root / "ckpts"
    nth, delay = rng.randint(1, 4), rng.uniform(0.0, 0.03)
    proc = subprocess.Popen(command(root, io), env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: set[str] = set()
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while len(seen) < nth and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never saved"
            seen.update(temporaries(ckpts))
            time.sleep(0.0005)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        output = proc.communicate(timeout=60)[0].decode(errors="replace")
    return f"save #{nth}, +{delay * 1000:.0f} ms: exit {proc.returncode}\n{output[-2000:]}"


@pytest.mark.parametrize("io", ["torch", "async"])
def test_random_kills_during_saves_lose_nothing(tmp_path: Path, io: str) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    reference = tmp_path / "reference"
    done = subprocess.run(command(reference, io), env=env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert f"DONE {MAX_STEPS}" in done.stdout, done.stdout + done.stderr

    root, history = tmp_path / "killed", []
    ckpts = root / "ckpts"
    for kill in range(KILLS):
        before = last_step(ckpts)
        what = kill_during_a_save(root, io, rng)
        history.append(what.splitlines()[0])
        step = last_step(ckpts)  # always loads: a kill never leaves a torn last.ckpt
        assert step >= before, f"seed {seed}, kill {kill}: last.ckpt went back from step {before} to {step}"
        if step == MAX_STEPS:
            break
    final = subprocess.run(command(root, io), env=env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert f"DONE {MAX_STEPS}" in final.stdout, f"seed {seed}\n{final.stdout}{final.stderr}"

    context = f"seed {seed}, kills: {history}"
    assert temporaries(ckpts) == [], context
    assert sorted(os.listdir(ckpts)) == [
        f"epoch=2-step={MAX_STEPS - 1}.ckpt",
        f"epoch=2-step={MAX_STEPS}.ckpt",
        "last.ckpt",
    ], context
    expected, actual = torch.load(reference / "final.pt"), torch.load(root / "final.pt")
    assert all(torch.equal(expected[key], actual[key]) for key in expected), context
