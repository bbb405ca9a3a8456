"""Settings shared by every test package."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

# Our own suite must notice any plugin that fails to load, and must not depend on
# whatever plugins happen to be installed beside it beyond the ones it tests.
os.environ.setdefault("TORCHPLUG_STRICT_PLUGINS", "1")

# The signal tests send SIGINT as Ctrl+C does to a job in the foreground. A run started in the
# background (``cmd &`` in a script, nohup) inherits SIGINT ignored, which the Trainer honours (it
# keeps a handler already installed), and so would every process the tests start: give this
# process Python's own handler back, which its children then get too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Undo what a test wrote to ``os.environ`` without monkeypatch.

    ``seed_everything`` exports ``TORCHPLUG_GLOBAL_SEED`` for the processes a launcher starts, as
    Lightning does with ``PL_GLOBAL_SEED``; left behind, it would re-seed every later test's
    subprocesses and change what they compute.
    """
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
