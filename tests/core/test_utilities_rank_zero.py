"""``rank_zero_only``: a decorator (as in Lightning) that runs a function on global rank 0 only.

The tests set ``rank_zero_only.rank`` as the Trainer does once the ranks are known.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchplug.utilities import rank_zero_only


@pytest.mark.parametrize(("global_rank", "ran"), [(0, True), (1, False)], ids=["rank-0", "rank-1"])
def test_the_decorated_function_runs_on_rank_zero_only(
    monkeypatch: pytest.MonkeyPatch, global_rank: int, ran: bool
) -> None:
    calls: list[int] = []

    @rank_zero_only
    def report(value: int) -> int:
        calls.append(value)
        return value * 2

    monkeypatch.setattr(rank_zero_only, "rank", global_rank)
    assert report(21) == (42 if ran else None)
    assert calls == ([21] if ran else [])
    assert report.__name__ == "report"  # functools.wraps


def test_other_ranks_get_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 3)
    assert rank_zero_only(lambda: "written", default="skipped")() == "skipped"


def test_the_rank_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    @rank_zero_only
    def on_zero() -> str:
        return "here"

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert on_zero() is None
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    assert on_zero() == "here"


def test_before_the_trainer_sets_it_the_launchers_variables_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", None)
    monkeypatch.setenv("RANK", "2")
    assert rank_zero_only(lambda: "here")() is None
    monkeypatch.setenv("RANK", "0")
    assert rank_zero_only(lambda: "here")() == "here"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)


def test_info_messages_are_shown_on_stderr_without_any_logging_configuration() -> None:
    done = run_python(
        "from torchplug.utilities.rank_zero import rank_zero_info\n"
        "import logging\n"
        "rank_zero_info('Learning rate set to %s', 0.01)\n"
        "logging.getLogger('torchplug.io').info('a module logger of torchplug')\n"
        "logging.getLogger('torchplug').debug('debug stays quiet')\n"
    )
    assert done.stderr.splitlines() == ["Learning rate set to 0.01", "a module logger of torchplug"]


def test_a_program_that_configures_logging_gets_the_messages_through_its_handlers_once() -> None:
    done = run_python(
        "import logging\n"
        "logging.basicConfig(format='ROOT %(name)s %(message)s', level=logging.WARNING)\n"
        "from torchplug.utilities.rank_zero import rank_zero_info\n"
        "rank_zero_info('shown once')\n"
    )
    assert done.stderr.splitlines() == ["ROOT torchplug shown once"]


def test_a_level_set_before_the_import_is_kept() -> None:
    done = run_python(
        "import logging\n"
        "logging.getLogger('torchplug').setLevel(logging.WARNING)\n"
        "from torchplug.utilities.rank_zero import rank_zero_info, log\n"
        "rank_zero_info('not shown')\n"
        "log.warning('shown')\n"
    )
    assert done.stderr.splitlines() == ["shown"]


def test_rank_zero_warn_takes_stacklevel_second_as_lightning_does() -> None:
    import warnings

    from torchplug.utilities.rank_zero import rank_zero_warn

    def caller() -> None:
        rank_zero_warn("look here", 2)  # the warning points at caller's caller: this test

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        caller()
    assert [(str(w.message), w.category, w.filename) for w in caught] == [("look here", UserWarning, __file__)]
