"""A twin's first-contact miss is revised only by a new first contact, and while the miss
keeps an executed mapping over the twin's untried best no new mapping runs: the policy
stayed on that mapping for good (`residency_cold_burst`, 1.02x with exact profiles; 1.24x
under the bandwidth physics with the CLI's decision budget). Now, every `RETRY_AFTER`
decisions held so, the twin's best runs once (at most `MAX_RETRIES` a shape)."""

from __future__ import annotations

import pytest

from langgraph_devsched.schedulers.policy.first_contact import (
    MAX_RETRIES,
    RETRY_AFTER,
    FirstContact,
)
from tests.builtin_bench import run_builtin

pytest.importorskip("numpy")


def test_a_held_miss_lets_the_twins_best_run_every_few_decisions_a_bounded_number_of_times():
    contact = FirstContact(max_shapes=4)
    shape = ("a", "b")
    assert not contact.retry(shape)  # nothing predicted yet: no miss to hold
    contact.expect(shape, (("a", "gpu_now"), ("b", "cpu")), 100.0)
    contact.settle(shape, {(("a", "gpu_now"), ("b", "cpu")): (150.0, 3)}, noise=0.0)
    tries = [contact.retry(shape) for _ in range(RETRY_AFTER * (MAX_RETRIES + 2))]
    assert tries.count(True) == MAX_RETRIES
    assert tries.index(True) == RETRY_AFTER - 1
    contact.forget(shape)  # a new twin: its own count
    assert not contact.retry(shape)


def test_cold_burst_ends_optimal_with_exact_profiles():
    scenario = run_builtin("residency_cold_burst")
    monitor = scenario.results["monitor"]
    assert monitor.optimal, (monitor.final_mapping, scenario.optimal_mapping,
                             monitor.round_makespans_ms)
