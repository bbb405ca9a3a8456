"""Running plugin code under a deadline: one worker per batch, late calls abandoned, nothing committed late."""

from __future__ import annotations

import threading

import pytest

from torchplug._deadline import THREAD_NAME, Abandoned, Ticket, run_each, run_one


def test_values_and_errors_come_back_in_order() -> None:
    def fail(ticket: Ticket) -> int:
        raise RuntimeError("plugin bug")

    outcomes = run_each([(lambda t: 1, "a"), (fail, "b"), (lambda t: 3, "c")], timeout=5)
    assert [o.value for o in outcomes] == [1, None, 3]
    assert isinstance(outcomes[1].error, RuntimeError)
    assert not any(o.timed_out for o in outcomes)


def test_a_batch_runs_in_one_worker_thread_that_is_gone_afterwards() -> None:
    before = threading.active_count()
    names = run_each([(lambda t: threading.current_thread().name, i) for i in range(50)], timeout=5)
    assert {o.value for o in names} == {THREAD_NAME}
    assert threading.active_count() == before


def test_no_deadline_runs_inline() -> None:
    outcome = run_one(lambda: threading.current_thread().name, timeout=0)
    assert outcome.value == threading.current_thread().name


def test_a_late_call_is_abandoned_and_commits_nothing() -> None:
    release, finished = threading.Event(), threading.Event()
    committed: list[str] = []
    refused: list[BaseException] = []

    def stuck(ticket: Ticket) -> None:
        ticket.phase = "importing"
        release.wait(30)
        try:
            with ticket.committing():
                committed.append("late")
        except Abandoned as exc:
            refused.append(exc)
        finished.set()

    def later(ticket: Ticket) -> str:
        with ticket.committing():
            committed.append("next")
        return "ok"

    outcomes = run_each([(stuck, "p1"), (later, "p2")], timeout=0.2)
    assert outcomes[0].timed_out and outcomes[0].phase == "importing" and outcomes[0].seconds >= 0.2
    assert outcomes[1].value == "ok"  # the next call went on in a fresh worker
    release.set()
    assert finished.wait(10)
    assert committed == ["next"]
    assert len(refused) == 1


def test_once_a_call_times_out_the_rest_of_its_group_is_skipped() -> None:
    release = threading.Event()
    calls: list[str] = []

    def blocked(ticket: Ticket) -> None:
        calls.append("first")
        release.wait(30)

    try:
        outcomes = run_each(
            [(blocked, "same"), (lambda t: calls.append("second"), "same"), (lambda t: 3, "other")], 0.2
        )
    finally:
        release.set()
    assert [o.timed_out for o in outcomes] == [True, True, False]
    assert outcomes[1].skipped and not outcomes[0].skipped
    assert calls == ["first"]
    assert outcomes[2].value == 3


@pytest.mark.parametrize("timeout", [0, 5])
def test_a_plugin_calling_sys_exit_is_an_outcome_not_an_exit(timeout: float) -> None:
    def leave(ticket: Ticket) -> None:
        raise SystemExit(3)

    (outcome,) = run_each([(leave, None)], timeout)
    assert isinstance(outcome.error, SystemExit)
