"""``rank_zero_only``: a decorator (as in Lightning) that runs a function on global rank 0 only.

The tests set ``rank_zero_only.rank`` as the Trainer does once the ranks are known.
"""

from __future__ import annotations

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
