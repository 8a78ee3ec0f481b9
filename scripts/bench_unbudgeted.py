"""`devsched bench --decision-cost none --json OUT` with the monitor policy unbudgeted, for
comparing two trees (`scripts/compare_bench.py`).

    PYTHONPATH=TREE python scripts/bench_unbudgeted.py OUT.json [SCENARIOS] [PHYSICS]
    PYTHONPATH=TREE python scripts/bench_unbudgeted.py OUT.json --generate N --seed S

The default policy cuts its search and fit at 100 ms of wall-clock time, so on a loaded
machine two runs of the same tree can map differently; without that budget a run depends
only on the code (`tests/builtin_bench.py` runs its quality tests the same way). With
``--generate`` only the monitor runs (the other schedulers do not depend on the budget).
"""

from __future__ import annotations

import sys
from pathlib import Path

from langgraph_devsched.bench.command import run_bench_command

if __name__ == "__main__":
    out = Path(sys.argv[1])
    unbudgeted = {"monitor": {"max_decision_ms": None}}
    if len(sys.argv) == 6 and sys.argv[2] == "--generate" and sys.argv[4] == "--seed":
        run_bench_command(generate=int(sys.argv[3]), seed=int(sys.argv[5]),
                          schedulers=["monitor"], decision_cost="none", json_path=out,
                          scheduler_options=unbudgeted)
    else:
        scenarios = Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
        physics = sys.argv[3] if len(sys.argv) > 3 else None
        run_bench_command(scenarios=scenarios, decision_cost="none", json_path=out,
                          physics=physics, scheduler_options=unbudgeted)
    print(f"wrote {out}")
