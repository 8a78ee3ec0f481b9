"""Quality kept while deciding fast: the monitor policy against the oracle on generated
scenarios, and its wall regret (decision time counted) against ucb's.

For each of ``count`` generated scenarios (one batch of 9-10 parallel calls, small enough
for the oracle) the benchmark runs the monitor policy twice — as configured by default, and
forced to its budgeted local search (no exact or bounded enumeration) — beside ucb and the
oracle. A scenario passes when both final mappings are within ``tolerance`` (2%) of the
optimum on the noise-free testbed.

>>> from langgraph_devsched.perf.quality import measure_quality
>>> q = measure_quality(count=1, rounds=3)
>>> sorted(q)
['all_within', 'scenarios', 'tolerance', 'wall_regret_ms', 'wall_regret_ratio_to_ucb']
"""

from __future__ import annotations

from typing import Any

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.perf.generate import generate_scenario
from langgraph_devsched.schedulers.registry import registered

LOCAL = "monitor_local"
"""The monitor policy with its search forced to the budgeted local search."""


def _local_only() -> Any:
    from langgraph_devsched.schedulers.monitor_policy import MonitorPolicy

    class LocalSearchPolicy(MonitorPolicy):
        """`MonitorPolicy` that never enumerates: local search from its seeds only."""

        name = LOCAL

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(exact_limit=1, bound_limit=1, **kwargs)

    return LocalSearchPolicy


def measure_quality(
    *, count: int = 20, rounds: int = 20, tolerance: float = 0.02, seed: int = 0,
) -> dict[str, Any]:
    """Final-mapping ratio to the optimum per generated scenario, and wall regrets."""
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
        "scenarios": rows,
        "all_within": all(r["within"] for r in rows),
        "wall_regret_ms": {n: round(v, 1) for n, v in walls.items()},
        "wall_regret_ratio_to_ucb": round(walls["monitor"] / ucb, 4) if ucb > 0 else None,
    }


def _local_factory(**kwargs: Any) -> Any:
    return _local_only()(**kwargs)
