"""``devsched bench`` with the agentic scheduler's consultation records counted.

Runs the same benchmark as ``devsched bench --llm MODEL --llm-base-url URL`` (in process,
through `run_bench_command`) and prints, per scenario, whether agentic and monitor ended
optimal and what the agentic scheduler's consultations recorded (`bench.agentic_stats`),
with the modes that ran, the candidate numbers picked (``--llm-mode pick``) and the machine's
1-minute load average at each consultation (other work shares the cores).

    python scripts/agentic_bench.py --llm qwen --llm-base-url http://127.0.0.1:8080/v1 \\
        --schedulers agentic,monitor,oracle --llm-mode pick --rounds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from langgraph_devsched.bench.agentic_stats import AgenticStats, format_agentic, merge
from langgraph_devsched.bench.command import run_bench_command
from langgraph_devsched.schedulers.agentic import scheduler as agentic
from langgraph_devsched.schedulers.agentic.config import (
    ENV_BASE_URL,
    ENV_MODEL,
    apply_llm_options,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", required=True)
    parser.add_argument("--llm-base-url", required=True)
    parser.add_argument("--llm-timeout", type=float, default=None)
    parser.add_argument("--llm-max-tokens", type=int, default=None)
    parser.add_argument("--llm-mode", default=None)
    parser.add_argument("--llm-answer", default=None)
    parser.add_argument("--llm-candidates", type=int, default=None)
    parser.add_argument("--schedulers", default="agentic,monitor,oracle")
    parser.add_argument("--scenarios", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args()
    os.environ[ENV_MODEL], os.environ[ENV_BASE_URL] = args.llm, args.llm_base_url
    apply_llm_options(timeout_s=args.llm_timeout, max_tokens=args.llm_max_tokens,
                      mode=args.llm_mode, answer=args.llm_answer, candidates=args.llm_candidates)

    runs: list[AgenticStats] = []
    extra: list[dict[str, Any]] = []
    original = agentic.AgenticScheduler.decide

    def counted(self: Any, batch: Any, view: Any, **kw: Any) -> Any:
        stats = self.__dict__.get("_bench_stats")
        if stats is None:
            stats = self.__dict__["_bench_stats"] = AgenticStats()
            runs.append(stats)
            extra.append({"modes": Counter(), "picks": Counter(), "load": []})
        decision = original(self, batch, view, **kw)
        stats.add(decision)
        record = decision.consultation
        if record is not None and record.asked:
            more = extra[runs.index(stats)]
            more["modes"][record.mode] += 1
            if record.pick is not None:
                more["picks"][record.pick] += 1
            more["load"].append(os.getloadavg()[0])
        return decision

    agentic.AgenticScheduler.decide = counted  # type: ignore[method-assign]
    names = [n.strip() for n in args.schedulers.split(",") if n.strip()]
    result = run_bench_command(scenarios=args.scenarios, schedulers=names, rounds=args.rounds)
    rows = []
    for scenario, stats, more in zip(result.scenarios, runs, extra, strict=False):
        summary = stats.summary()
        res = scenario.results
        ratio = None
        if "agentic" in res and scenario.optimal_makespan_ms > 0:
            ratio = res["agentic"].final_makespan_ms / scenario.optimal_makespan_ms
        rows.append({
            "scenario": scenario.name,
            "agentic_optimal": res["agentic"].optimal if "agentic" in res else None,
            "agentic_final_ratio": ratio,
            "monitor_optimal": res["monitor"].optimal if "monitor" in res else None,
            "agentic": summary.model_dump() if summary else None,
            "modes": dict(more["modes"]),
            "picks": dict(sorted(more["picks"].items())),
            "load_mean": statistics.mean(more["load"]) if more["load"] else None,
        })
        print(f"{scenario.name}: optimal agentic={rows[-1]['agentic_optimal']} "
              f"(final {ratio or 0:.3f}x) monitor={rows[-1]['monitor_optimal']}")
        if summary is not None:
            print("  " + format_agentic("agentic", summary))
        load = rows[-1]["load_mean"]
        print(f"  modes {rows[-1]['modes']} picks {rows[-1]['picks']} "
              f"load {load if load is None else round(load, 2)}")
    total = merge(s.summary() for s in runs)
    if total is not None:
        print("ALL " + format_agentic("agentic", total))
    optimal = sum(1 for r in rows if r["agentic_optimal"])
    print(f"agentic optimal in {optimal}/{len(rows)} scenarios; monitor in "
          f"{sum(1 for r in rows if r['monitor_optimal'])}/{len(rows)}")
    if args.json is not None:
        args.json.write_text(json.dumps(
            {"rows": rows, "total": total.model_dump() if total else None}, indent=2))


if __name__ == "__main__":
    main()
