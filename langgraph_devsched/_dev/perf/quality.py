"""Quality kept while deciding fast, on generated scenarios of 9-10 parallel calls (small
enough for the oracle).

* **search** — the bounded search alone, scoring mappings on the scenario's noise-free
  testbed (a perfect model), from the seeds the policy uses (HEFT, dmda, all-CPU,
  all-queued): forced to its budgeted local search (``local``) and as configured by default
  (local search, then branch and bound while the budget lasts). A scenario passes when the
  local search's mapping is within ``tolerance`` (2%) of the oracle's optimum.
* **end to end** — the benchmark runs the monitor policy (default, and forced to local
  search) beside ucb and the oracle for ``rounds`` rounds: final mapping over the optimum,
  and wall regret (decision time counted) against ucb's. Here the policy's *model* (learnt
  from hints and observations) is under test too.

>>> from langgraph_devsched._dev.perf.quality import measure_quality
>>> q = measure_quality(count=1, rounds=3)
>>> sorted(q)  # doctest: +NORMALIZE_WHITESPACE
['all_within', 'scenarios', 'search', 'search_all_within', 'tolerance', 'wall_regret_ms',
 'wall_regret_ratio_to_ucb']
"""

from __future__ import annotations

from typing import Any

from langgraph_devsched._dev.perf.generate import generate_scenario
from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.policy.scheduler import MAX_DECISION_MS
from langgraph_devsched.schedulers.registry import registered

LOCAL = "monitor_local"
"""The monitor policy with its search forced to the budgeted local search."""


def _local_only() -> Any:
    from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy

    class LocalSearchPolicy(DefaultPolicy):
        """`DefaultPolicy` that never enumerates: local search from its seeds only."""

        name = LOCAL

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(exact_limit=1, bound_limit=1, **kwargs)

    return LocalSearchPolicy


def search_on_truth(scenario: Any, *, budget_ms: float = MAX_DECISION_MS) -> dict[str, Any]:
    """The bounded search on ``scenario``'s noise-free testbed against the oracle."""
    from langgraph_devsched.bench.runner import optimum, scenario_batches
    from langgraph_devsched.schedulers.base import SchedulerView
    from langgraph_devsched.schedulers.classic.dmda import DmdaScheduler
    from langgraph_devsched.schedulers.classic.heft import HeftScheduler
    from langgraph_devsched.schedulers.policy.search import search_mappings

    bed = scenario.make_testbed(noise=0.0)
    (batch,) = scenario_batches(scenario)
    tools = [c.tool for c in batch.calls]
    choices = [c.spec.allowed_options() for c in batch.calls]
    view = SchedulerView(bed.device_state())
    cpu: DeviceOption = "cpu"
    queued: DeviceOption = "gpu_queued"
    seeds = [HeftScheduler().decide(batch, view).options_for(batch),
             DmdaScheduler().decide(batch, view).options_for(batch),
             tuple(cpu for _ in tools), tuple(queued for _ in tools)]

    def score(mappings: Any) -> Any:
        return bed.mapping_makespans(tools, mappings).tolist()

    best = optimum(scenario)[0][0]
    local = search_mappings(score, choices, seeds=seeds, exact_limit=1, bound_limit=1,
                            budget_ms=budget_ms)
    full = search_mappings(score, choices, seeds=seeds, budget_ms=budget_ms,
                           lower_bounds=lambda codes: bed.lower_bounds(tools, codes))
    return {
        "name": scenario.name, "calls": len(tools),
        "local_ratio": round(local.scores[local.best] / best, 4),
        "local_scored": len(local.scores), "local_out_of_time": local.out_of_time,
        "default_ratio": round(full.scores[full.best] / best, 4),
        "default_method": full.method,
    }


def measure_quality(
    *, count: int = 20, rounds: int = 20, tolerance: float = 0.02, seed: int = 0,
) -> dict[str, Any]:
    """Search and end-to-end ratios to the optimum per generated scenario, wall regrets."""
    search = [search_on_truth(generate_scenario(seed + k, calls=9 + k % 2, rounds=rounds))
              for k in range(count)]
    names = ["monitor", LOCAL, "ucb", "oracle"]
    rows = []
    walls = dict.fromkeys(names, 0.0)
    with registered(LOCAL, f"{__name__}:_local_factory"):
        for k in range(count):
            scenario = generate_scenario(seed + k, calls=9 + k % 2, rounds=rounds)
            result = run_scenario(scenario, names)
            row: dict[str, Any] = {"name": scenario.name, "calls": 9 + k % 2,
                                   "optimal_makespan_ms": round(result.optimal_makespan_ms, 3)}
            for name in names:
                r = result.results[name]
                ratio = r.final_makespan_ms / max(result.optimal_makespan_ms, 1e-9)
                row[f"{name}_ratio"] = round(ratio, 4)
                walls[name] += r.wall_regret_ms
            row["within"] = all(row[f"{n}_ratio"] <= 1 + tolerance for n in ("monitor", LOCAL))
            rows.append(row)
    ucb = walls["ucb"]
    return {
        "tolerance": tolerance,
        "search": search,
        "search_all_within": all(r["local_ratio"] <= 1 + tolerance for r in search),
        "scenarios": rows,
        "all_within": all(r["within"] for r in rows),
        "wall_regret_ms": {n: round(v, 1) for n, v in walls.items()},
        "wall_regret_ratio_to_ucb": round(walls["monitor"] / ucb, 4) if ucb > 0 else None,
    }


def _local_factory(**kwargs: Any) -> Any:
    return _local_only()(**kwargs)
