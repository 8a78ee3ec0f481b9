"""Bounded mapping search: exact where cheap, branch and bound exact on the twin, local search
never worse than its seeds, and the time budget read from an injected clock."""

from __future__ import annotations

import itertools
import random

import pytest

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.policy.search import demand, search_mappings
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

pytest.importorskip("numpy")

ALL: tuple[DeviceOption, ...] = ("gpu_now", "gpu_queued", "cpu")


def random_bed(n: int, seed: int) -> tuple[SimulatedTestbed, list[str]]:
    rng = random.Random(seed)
    params = {
        f"t{i}": ToolParams(
            cpu_ms=rng.uniform(10, 400), gpu_ms=rng.uniform(5, 80),
            transfer_ms=rng.uniform(0, 40), vram_mb=rng.uniform(100, 5000),
            gpu_share=rng.uniform(0.2, 1.0), cpu_threads=rng.choice((1, 2)),
        )
        for i in range(n)
    }
    bed = SimulatedTestbed(params, vram_budget_mb=rng.choice((6000, 12000)),
                           cpu_cores=rng.choice((2, 4, 8)))
    return bed, list(params)


def brute_force(bed: SimulatedTestbed, tools: list[str]) -> tuple[float, tuple[int, ...]]:
    return min(
        (bed.makespan([(str(i), t, o) for i, (t, o) in enumerate(zip(tools, m, strict=True))]),
         demand(m))
        for m in itertools.product(ALL, repeat=len(tools))
    )


def scorer(bed: SimulatedTestbed, tools: list[str]):  # type: ignore[no-untyped-def]
    def score(mappings):  # type: ignore[no-untyped-def]
        return bed.mapping_makespans(tools, mappings).tolist()

    return score


@pytest.mark.parametrize("seed", range(6))
def test_branch_and_bound_finds_the_brute_force_optimum(seed: int) -> None:
    bed, tools = random_bed(7, seed)
    result = search_mappings(
        scorer(bed, tools), [ALL] * 7, exact_limit=1,
        lower_bounds=lambda codes: bed.lower_bounds(tools, codes),
    )
    assert result.method == "bound" and result.complete
    best = result.scores[result.best]
    assert (best, demand(result.best)) == brute_force(bed, tools)
    assert len(result.scores) < 3**7  # it did not score everything


@pytest.mark.parametrize("seed", range(4))
def test_local_search_never_returns_worse_than_its_best_seed(seed: int) -> None:
    bed, tools = random_bed(14, seed)
    rng = random.Random(seed)
    seeds = [tuple(rng.choice(ALL) for _ in tools) for _ in range(3)]
    result = search_mappings(scorer(bed, tools), [ALL] * 14, seeds=seeds)
    assert result.method == "local" and not result.complete
    seed_best = min(bed.mapping_makespans(tools, seeds).tolist())
    assert result.scores[result.best] <= seed_best
    # a local optimum: no single-call change improves it
    neighbours = [(*result.best[:i], o, *result.best[i + 1:])
                  for i in range(14) for o in ALL if o != result.best[i]]
    assert min(bed.mapping_makespans(tools, neighbours).tolist()) >= result.scores[result.best]


def test_the_time_budget_is_read_from_the_injected_clock() -> None:
    bed, tools = random_bed(30, 1)
    now = [0.0]
    batches = []

    def clock() -> float:
        return now[0]

    def score(mappings):  # type: ignore[no-untyped-def]
        batches.append(len(mappings))
        now[0] += 0.010  # every batch of scores takes 10 ms of the fake clock
        return bed.mapping_makespans(tools, mappings).tolist()

    seed = tuple("cpu" for _ in tools)
    result = search_mappings(score, [ALL] * 30, seeds=[seed], budget_ms=35.0, clock=clock,
                             chunk=8)
    assert result.out_of_time
    assert len(batches) == 4  # the seed, then chunks until 35 ms were spent
    assert result.scores[result.best] <= result.scores[seed]


def test_small_batches_are_enumerated_exactly() -> None:
    bed, tools = random_bed(4, 3)
    result = search_mappings(scorer(bed, tools), [ALL] * 4)
    assert result.method == "exact" and len(result.scores) == 81
    assert (result.scores[result.best], demand(result.best)) == brute_force(bed, tools)
