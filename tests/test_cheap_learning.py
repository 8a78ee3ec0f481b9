"""Decisions stay cheap while the monitor policy learns a new shape (issue 25, item 2).

The cost of a decision is counted in batched simulations of the twin (each
`SimulatedTestbed.call_times` batch: the contention fit's unit of work), not in seconds, so
the verdict is the same on any machine; the policy runs without a time budget
(``max_decision_ms=None``), so no deadline cuts the work short.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langgraph_devsched._dev.perf.decisions import declared
from langgraph_devsched._dev.perf.generate import generate_tools
from langgraph_devsched.schedulers import Batch, SchedulerView, make_scheduler
from langgraph_devsched.testbed import SimulatedTestbed

ROUNDS = 20


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many fit simulations (`call_times` batches) each decision ran, appended to."""
    counts: list[int] = []
    real = SimulatedTestbed.call_times

    def counted(self: SimulatedTestbed, *args: object, **kwargs: object) -> object:
        if counts:
            counts[-1] += 1
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SimulatedTestbed, "call_times", counted)
    yield counts


def learn(seed: int, n: int, counts: list[int]) -> list[bool]:
    """A new shape of ``n`` distinct tools with declared solo profiles (8 GB), ``ROUNDS``
    rounds through the scheduler protocol; returns which decisions were reused."""
    params = generate_tools(n, seed=seed)
    bed = SimulatedTestbed(params, vram_budget_mb=8000, cpu_cores=8, noise=0.05, seed=seed)
    batch = Batch.of([(f"c{i}", t, declared(p)) for i, (t, p) in enumerate(params.items())])
    policy = make_scheduler("monitor", max_decision_ms=None)
    reused = []
    for _ in range(ROUNDS):
        counts.append(0)
        decision = policy.decide(batch, SchedulerView(bed.device_state()))
        reused.append(decision.reused)
        calls = list(zip(batch.call_ids, [c.tool for c in batch.calls],
                         decision.options_for(batch), strict=True))
        policy.observe(batch, decision, bed.run_step(calls))
    return reused


@pytest.mark.parametrize("seed", [0, 1])
def test_every_decision_of_a_learning_shape_runs_a_few_fit_simulations(
    seed: int, batches: list[int]
) -> None:
    """A warm refit is one batched steepest-descent step or a few, and a contention-model
    screen is spread over several decisions: no decision of the shape's first rounds runs
    more than 8 fit simulations (at d7c8ce5: 15-29 in each of rounds 2-14, a refit tool by
    tool after every run and the whole screen at once)."""
    reused = learn(seed, 8, batches)
    assert max(batches) <= 8, batches
    assert sum(batches) <= 6 * ROUNDS, batches
    assert any(reused[5:]), reused  # and it settles within the 20 rounds



def test_a_fit_cut_by_its_deadline_resumes_on_new_evidence() -> None:
    """A contention fit that a deadline cut after its passes (e.g. in fitting a newly
    selected model's shares) is refitted warm on the next decision even though a new run
    moved its evidence, so it completes; it used to restart its tool-by-tool passes from the
    first tool, which a deadline cut again on every run (paying the whole deadline each
    decision). The policy's clock is a counter: the same cuts on any machine."""
    import dataclasses

    ticks = [0.0]

    def clock() -> float:  # 1 ms a reading
        ticks[0] += 0.001
        return ticks[0]

    params = generate_tools(8, seed=0)
    bed = SimulatedTestbed(params, vram_budget_mb=8000, cpu_cores=8, noise=0.05, seed=0)
    batch = Batch.of([(f"c{i}", t, declared(p)) for i, (t, p) in enumerate(params.items())])
    policy = make_scheduler("monitor", max_decision_ms=10.0, clock=clock, reuse=False)
    fits = policy._fits  # type: ignore[attr-defined]
    shape = tuple(sorted(c.tool for c in batch.calls))

    def step() -> None:
        decision = policy.decide(batch, SchedulerView(bed.device_state()))
        calls = list(zip(batch.call_ids, [c.tool for c in batch.calls],
                         decision.options_for(batch), strict=True))
        policy.observe(batch, decision, bed.run_step(calls))

    for _ in range(8):
        step()
    evidence, fit = fits[shape]
    assert fit.complete
    fits[shape] = (evidence, dataclasses.replace(fit, complete=False, visits_left=0))
    states = []
    for _ in range(3):
        step()  # each run moves the evidence
        states.append(fits[shape][1].complete)
    assert True in states, states
