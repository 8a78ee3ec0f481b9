"""`devsched bench --decision-cost none --json OUT` with the monitor policy unbudgeted, for
comparing two trees (`scripts/compare_bench.py`).

    PYTHONPATH=TREE python scripts/bench_unbudgeted.py OUT.json [SCENARIOS] [PHYSICS]

The default policy cuts its search and fit at 100 ms of wall-clock time, so on a loaded
machine two runs of the same tree can map differently; without that budget a run depends
only on the code (`tests/builtin_bench.py` runs its quality tests the same way).
"""

from __future__ import annotations

import sys
from pathlib import Path

from langgraph_devsched.bench.command import run_bench_command

if __name__ == "__main__":
    out = Path(sys.argv[1])
    scenarios = Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
    physics = sys.argv[3] if len(sys.argv) > 3 else None
    run_bench_command(scenarios=scenarios, decision_cost="none", json_path=out, physics=physics,
                      scheduler_options={"monitor": {"max_decision_ms": None}})
    print(f"wrote {out}")
