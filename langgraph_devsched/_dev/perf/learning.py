"""Decision time of the monitor policy in every round of a new shape (issue 25).

Through the public protocol: `make_scheduler("monitor")`, ``decide``/``observe`` on a
`SimulatedTestbed` (8 GB, 8 cores, noise 5 %), one batch of ``n`` distinct generated tools
(`perf.generate`) with declared solo profiles, ``rounds`` rounds, one new policy per seed.
Each decision is timed in CPU time (`time.thread_time`, also the policy's clock, so its
budget counts CPU time too: a loaded machine's waits do not cut it short).

>>> row = measure_learning(2, seeds=1, rounds=3)
>>> sorted(row)  # doctest: +NORMALIZE_WHITESPACE
['first_reused', 'max_round_p50_ms', 'n', 'per_round_p50_ms', 'rounds', 'rounds_2_20_p50_ms',
 'seeds']
>>> len(row["per_round_p50_ms"])
3
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from langgraph_devsched._dev.perf.decisions import declared
from langgraph_devsched._dev.perf.generate import generate_tools
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.registry import make_scheduler
from langgraph_devsched.testbed import SimulatedTestbed


def learn(seed: int, n: int, rounds: int, **options: Any) -> list[tuple[float, bool]]:
    """One new shape's rounds: (CPU ms of the decision, whether it was reused) each."""
    params = generate_tools(n, seed=seed)
    bed = SimulatedTestbed(params, vram_budget_mb=8000, cpu_cores=8, noise=0.05, seed=seed)
    batch = Batch.of([(f"c{i}", t, declared(p)) for i, (t, p) in enumerate(params.items())])
    policy = make_scheduler("monitor", clock=time.thread_time, **options)
    out = []
    for _ in range(rounds):
        t0 = time.thread_time()
        decision = policy.decide(batch, SchedulerView(bed.device_state()))
        out.append(((time.thread_time() - t0) * 1000.0, bool(decision.reused)))
        calls = list(zip(batch.call_ids, [c.tool for c in batch.calls],
                         decision.options_for(batch), strict=True))
        policy.observe(batch, decision, bed.run_step(calls))
    return out


def measure_learning(
    n: int, *, seeds: int = 5, rounds: int = 30, **options: Any
) -> dict[str, Any]:
    """Per-round p50 over ``seeds`` new shapes of ``n`` calls, the p50 of rounds 2-20, the
    highest per-round p50 of rounds 1-20 and each seed's first reused round (None: never)."""
    if n < 1 or seeds < 1 or rounds < 1:
        raise ValueError(f"n, seeds and rounds must be >= 1, got {n}, {seeds}, {rounds}")
    runs = [learn(seed, n, rounds, **options) for seed in range(seeds)]
    per_round = [statistics.median(r[k][0] for r in runs) for k in range(rounds)]
    learning = [r[k][0] for r in runs for k in range(1, min(20, rounds))]
    return {
        "n": n, "seeds": seeds, "rounds": rounds,
        "per_round_p50_ms": [round(x, 2) for x in per_round],
        "rounds_2_20_p50_ms": round(statistics.median(learning), 2) if learning else None,
        "max_round_p50_ms": round(max(per_round[:20]), 2),
        "first_reused": [next((k + 1 for k, (_, used) in enumerate(r) if used), None)
                         for r in runs],
    }
