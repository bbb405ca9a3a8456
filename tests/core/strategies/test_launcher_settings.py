"""The launcher's variables are checked in the main thread, before any rank starts."""

from __future__ import annotations

import re
import sys

import pytest

from torchplug import SettingsError
from torchplug.strategies.launchers import subprocess_script
from torchplug.strategies.launchers.subprocess_script import SubprocessScriptLauncher, _Children


@pytest.mark.parametrize("value", ["abc", "-1", "inf"])
def test_a_bad_rank_failure_timeout_stops_the_launch_before_any_rank_starts(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TORCHPLUG_RANK_FAILURE_TIMEOUT", value)
    children = _Children()
    message = f"TORCHPLUG_RANK_FAILURE_TIMEOUT={value!r} is not valid. Allowed: a number >= 0."
    with pytest.raises(SettingsError, match=re.escape(message)):
        children.start([sys.executable, "-c", "pass"], range(1, 2), {})
    assert children.processes == {}


def test_the_rank_failure_timeout_is_read_once_in_the_main_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_RANK_FAILURE_TIMEOUT", "2.5")
    assert subprocess_script.failure_timeout() == 2.5
    monkeypatch.delenv("TORCHPLUG_RANK_FAILURE_TIMEOUT")
    assert subprocess_script.failure_timeout() == 30.0


def test_a_bad_parent_pid_in_a_started_rank_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_PARENT_PID", "rank0")
    with pytest.raises(SettingsError, match=r"TORCHPLUG_PARENT_PID='rank0' is not valid\. Allowed: an integer >= 1\."):
        SubprocessScriptLauncher._watch_parent_once()
