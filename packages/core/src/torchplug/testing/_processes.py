"""Running a fit in fresh processes (``python -m torchplug.testing._worker fit``) and reading what each rank wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from torchplug.testing._check import CheckFailed
from torchplug.testing._context import Context

__all__ = ["worker_fit"]

#: Lines of a failed run's output quoted in the failure message.
_TAIL = 25


def worker_fit(
    context: Context,
    label: str,
    arguments: dict[str, Any],
    *,
    crash_at: int | None = None,
    ckpt_path: str | None = None,
    collectives: bool = False,
) -> list[dict[str, Any]]:
    """Run the conformance fit with ``Trainer(**arguments)`` in a new process; return each rank's record, by rank.

    The run's processes form one session, killed as a whole when the run outlives the context's
    timeout. ``arguments`` must be JSON-ready (registry names, numbers).

    Raises:
        CheckFailed: The run failed or timed out (with the end of its output).
    """
    root = context.workdir / label
    root.mkdir(parents=True)
    spec = root / "spec.json"
    spec.write_text(
        json.dumps({"arguments": arguments, "crash_at": crash_at, "ckpt_path": ckpt_path, "collectives": collectives})
    )
    log = root / "output.log"
    command = [sys.executable, "-m", "torchplug.testing._worker", "fit", "--spec", str(spec)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=root, env=context.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=context.timeout)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            raise CheckFailed(
                f"Trainer({_arguments(arguments)}).fit() did not finish in {context.timeout:.0f} s "
                f"(a rank waiting for a peer?):\n{_tail(log)}"
            ) from None
        finally:
            _kill_session(process)  # a launcher's leftover child, if any, never outlives the check
    if code != 0:
        raise CheckFailed(f"Trainer({_arguments(arguments)}).fit() exited with code {code}:\n{_tail(log)}")
    records = [json.loads(p.read_text()) for p in sorted(root.glob("rank-*.json"))]
    if not records:
        raise CheckFailed(
            f"Trainer({_arguments(arguments)}).fit() finished, but no rank wrote its record:\n{_tail(log)}"
        )
    return sorted(records, key=lambda r: int(r["rank"]))


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").rstrip().splitlines()
    return "\n".join(f"    {line}" for line in lines[-_TAIL:])


def _arguments(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())
