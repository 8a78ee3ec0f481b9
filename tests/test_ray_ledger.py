"""The shared slot ledger's body (`executors.ray_ledger.SlotLedger`), without Ray: job tags,
the reclaim of dead jobs' reservations, and a driver that stops waiting."""

from __future__ import annotations

import threading

import pytest

from langgraph_devsched.executors.ray_ledger import Granted, Refused, SlotLedger
from langgraph_devsched.ledger import QueueTimeoutError, WeightsNeed


def body() -> SlotLedger:
    return SlotLedger(1000.0, reclaim_s=0)  # no reaper thread: reclaim is called directly


def test_admission_is_one_budget_for_every_job() -> None:
    ledger = body()
    a = ledger.try_reserve("job-a", "t1", 600.0, 0.5, None)
    assert isinstance(a, Granted)
    assert ledger.try_reserve("job-b", "t2", 600.0, 0.5, None) is None  # would exceed
    b = ledger.try_reserve("job-b", "t3", 400.0, 0.5, None)
    assert isinstance(b, Granted) and b.view.in_use_mb == 1000.0
    assert sorted(h.job for h in b.view.held) == ["job-a", "job-b"]


def test_reclaim_releases_only_the_dead_jobs_reservations_and_keeps_weights() -> None:
    ledger = body()
    need = WeightsNeed("m", 300.0)
    first = ledger.try_reserve("job-a", "t1", 200.0, 0.5, need)
    second = ledger.try_reserve("job-b", "t2", 100.0, 0.5, need)
    assert isinstance(first, Granted) and first.loaded
    assert isinstance(second, Granted) and not second.loaded  # resident: loaded once
    assert ledger.reclaim_jobs({"job-a"}) == 1
    view = ledger.view()
    assert [(h.job, h.mb) for h in view.held] == [("job-b", 100.0)]
    assert view.in_use_mb == 400.0 and view.reclaimed == 1
    ledger.release("t2")
    assert ledger.view().in_use_mb == ledger.view().weights_mb == 300.0
    assert ledger.reclaim_jobs({"job-a", "job-b"}) == 0  # nothing left to reclaim


def test_a_driver_that_stops_waiting_leaves_nothing_behind() -> None:
    ledger = body()
    full = ledger.try_reserve("job-a", "t1", 1000.0, 1.0, None)
    assert isinstance(full, Granted)
    answers: list[Granted | Refused] = []
    waiter = threading.Thread(target=lambda: answers.append(
        ledger.reserve("job-b", "t2", 500.0, 0.5, None, None)))
    waiter.start()
    ledger.cancel("t2")  # the driver gave up (e.g. its async call was cancelled)
    ledger.release("t1")  # room: the queued request is admitted, then refused
    waiter.join(30)
    assert not waiter.is_alive()
    assert isinstance(answers[0], Refused)
    assert ledger.view().in_use_mb == 0.0 and not ledger.view().held


def test_a_release_names_its_request_so_it_never_hits_another() -> None:
    ledger = body()
    assert ledger.try_reserve("job-a", "t1", 500.0, 0.5, None) is not None
    ledger.release("from-a-dead-actor")  # a token this actor never granted: nothing
    assert ledger.view().in_use_mb == 500.0
    ledger.release("t1")
    ledger.release("t1")  # idempotent
    assert ledger.view().in_use_mb == 0.0


def test_cancel_after_the_grant_releases_it() -> None:
    ledger = body()
    granted = ledger.try_reserve("job-a", "t1", 500.0, 0.5, None)
    assert isinstance(granted, Granted)
    ledger.cancel("t1")
    assert ledger.view().in_use_mb == 0.0 and not ledger.view().held


def test_a_queued_request_times_out_as_a_value() -> None:
    ledger = body()
    assert ledger.try_reserve("job-a", "t1", 1000.0, 1.0, None) is not None
    refused = ledger.reserve("job-b", "t2", 500.0, 0.5, 0.05, None)
    assert isinstance(refused, Refused)
    with pytest.raises(QueueTimeoutError):
        raise refused.error
