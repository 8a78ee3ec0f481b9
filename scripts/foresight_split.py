"""How much of a generated set's total ratio is foresight of first uses (one GPU).

    python scripts/foresight_split.py RESULTS.json SEED [OUT.json]

RESULTS.json is a ``devsched bench --generate N --seed SEED --json`` file with a ``monitor``
row. For each one-GPU workload it computes a second whole-run reference, *without foresight
of first uses*: the exact search of `bench.horizon.whole_run_reference`, except that no load
(between steps or beside a step) brings in a model none of whose tools has been called yet.
A model still loads on its first call, and everything after it is as clairvoyant as the
reference (the calls that follow, when the run ends). It then prints, as p50 / p95 / max:

* ``monitor / reference``: the bench's total ratio;
* ``monitor / without first uses``: what is left once first uses are not known in advance;
* ``without first uses / reference``: the part that knowing first uses is worth.

A scheduler that warms declared models before their first call can beat the second
reference (it is not a bound for it); a scheduler that never loads a model before a call
of it cannot. Several-GPU workloads are left out (their search is `bench.horizon_gpus`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from langgraph_devsched import batchsim
from langgraph_devsched.bench import horizon
from langgraph_devsched.bench.generate import generated_scenario
from langgraph_devsched.bench.runner import _several_gpus, scenario_batches


class _Unforeseen(horizon._Search):
    """The reference's search, with no load of a model before a call of it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        seen: set[str] = set()
        self.called: list[frozenset[str]] = []
        for batch in self.batches:
            seen.update(m for c in batch.calls if (m := c.spec.model_name(c.tool)))
            self.called.append(frozenset(seen))

    def after(self, end: batchsim.Residency, span: float, b: int,
              options: Any) -> list[tuple[batchsim.Residency, float]]:
        had = {m for m, _ in end.gpu} | set(end.host)
        return [(state, delay) for state, delay in super().after(end, span, b, options)
                if {m for m, _ in state.gpu} | set(state.host) <= had | self.called[b]]


def unforeseen_total(seed: int, index: int) -> float | None:
    """The whole-run reference of ``gen-s{seed}-{index}`` without foresight of first uses;
    None on several GPUs."""
    scenario = generated_scenario(seed, index)
    if _several_gpus(scenario):
        return None
    search = horizon._Search
    horizon._Search = _Unforeseen  # type: ignore[misc]
    try:
        return horizon.whole_run_reference(
            scenario.make_testbed(noise=0.0), scenario_batches(scenario), 1,
            think_ms=scenario.workload.think_ms).total_ms
    finally:
        horizon._Search = search  # type: ignore[misc]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> None:
    results, seed = json.loads(Path(argv[1]).read_text()), int(argv[2])
    rows = []
    for scenario in results["scenarios"]:
        total = unforeseen_total(seed, int(scenario["name"].rsplit("-", 1)[1]))
        if total is None:
            continue
        rows.append({"name": scenario["name"], "reference_ms": scenario["total_reference_ms"],
                     "unforeseen_ms": total,
                     "monitor_ms": scenario["results"]["monitor"]["total_ms"]})
    if len(argv) > 3:
        Path(argv[3]).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} one-GPU workloads of seed {seed}")
    for label, num, den in (("monitor / reference", "monitor_ms", "reference_ms"),
                            ("monitor / without first uses", "monitor_ms", "unforeseen_ms"),
                            ("without first uses / reference", "unforeseen_ms",
                             "reference_ms")):
        ratios = [r[num] / r[den] for r in rows]
        print(f"{label}: p50 {_pct(ratios, 0.5):.3f}  p95 {_pct(ratios, 0.95):.3f}  "
              f"max {max(ratios):.3f}  above 1.10: {sum(1 for x in ratios if x > 1.10)}")


if __name__ == "__main__":
    main(sys.argv)
