"""``devsched bench`` with the agentic scheduler's consultation records counted.

Runs the same benchmark as ``devsched bench --llm MODEL --llm-base-url URL`` (in process,
through `run_bench_command`) and prints, per scenario, whether agentic and monitor ended
optimal and what the agentic scheduler's consultations recorded (`bench.agentic_stats`),
with the modes that ran, the candidate numbers picked (``--llm-mode pick``) and the machine's
1-minute load average at each consultation (other work shares the cores).

    python scripts/agentic_bench.py --llm qwen --llm-base-url http://127.0.0.1:8080/v1 \\
        --schedulers agentic,monitor,oracle --llm-mode pick --rounds 10

``--must-show BENCH.json`` instead reads a ``devsched bench --json`` file with agentic and
monitor rows and prints the issue's figures (`must_show`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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


def must_show(path: Path) -> dict[str, Any]:
    """The issue's figures from a ``devsched bench --json`` file with agentic and monitor
    rows: per scenario the final ratios (agentic within 1.02x of the monitor?), the
    consultations answered and used, p50, deviations (as the scheduler judged them, and
    exactly: ``net_exact_ms``), the whole run against the monitor's, and vetoes; over all
    of them the
    totals, the p50 of every consultation, and the prompt tokens per answered consultation
    (all, and not read from the server's cache)."""
    data = json.loads(path.read_text())
    rows, lat = [], []
    tot: Counter[str] = Counter()
    for sc in data["scenarios"]:
        opt, res = sc["optimal_makespan_ms"], sc["results"]
        mon, ag = res["monitor"], res["agentic"]
        st = ag.get("agentic") or {}
        rm, ra = mon["final_makespan_ms"] / opt, ag["final_makespan_ms"] / opt
        lat += st.get("latencies_ms") or []
        fields = ("consultations", "answered", "valid_answers", "deviations", "deviations_won",
                  "deviations_lost", "deviations_exact", "deviations_won_exact",
                  "deviations_lost_exact", "explorations", "prompt_tokens", "cached_tokens")
        for k in fields:
            tot[k] += st.get(k) or 0
        tot["timeouts"] += (st.get("fallbacks") or {}).get("timeout", 0)
        for why, count in (st.get("skipped") or {}).items():  # decided without asking
            tot[f"skipped_{why}"] += count
        tot["within"] += int(ra <= rm * 1.02 + 1e-9)
        tot["agentic_optimal"] += int(ag.get("optimal", False))
        tot["monitor_optimal"] += int(mon.get("optimal", False))
        net, cost = st.get("deviation_won_ms") or 0.0, st.get("exploration_cost_ms") or 0.0
        exact = st.get("deviation_won_exact_ms") or 0.0
        tot["net_ms"] += net  # type: ignore[assignment]
        tot["net_exact_ms"] += exact  # type: ignore[assignment]
        tot["whole_run_vs_monitor_ms"] += ag["total_ms"] - mon["total_ms"]  # type: ignore[assignment]
        tot["exploration_ms"] += cost  # type: ignore[assignment]
        rows.append({"scenario": sc["name"], "monitor": round(rm, 3), "agentic": round(ra, 3),
                     "within_1.02": ra <= rm * 1.02 + 1e-9,
                     "answered": st.get("answered"), "used": st.get("valid_answers"),
                     "consultations": st.get("consultations"),
                     "p50_s": round((st.get("latency_p50_ms") or 0) / 1000, 1),
                     "won": st.get("deviations_won"), "lost": st.get("deviations_lost"),
                     "net_ms": round(net), "net_exact_ms": round(exact, 1),
                     "won_exact": st.get("deviations_won_exact"),
                     "lost_exact": st.get("deviations_lost_exact"),
                     "whole_run_vs_monitor_ms": round(ag["total_ms"] - mon["total_ms"], 1),
                     "exploration_ms": round(cost),
                     "vetoes": st.get("vetoes") or {},
                     "fallbacks": st.get("fallbacks") or {}})
    n = tot["consultations"] or 1
    answered_calls = max(1, tot["consultations"] - tot["timeouts"])
    total = {**tot, "scenarios": len(rows), "answered_rate": tot["answered"] / n,
             "used_rate": tot["valid_answers"] / n,
             "p50_s": statistics.median(lat) / 1000 if lat else None,
             "prompt_tokens_per_answered": tot["prompt_tokens"] / answered_calls,
             "uncached_tokens_per_answered":
                 (tot["prompt_tokens"] - tot["cached_tokens"]) / answered_calls}
    return {"rows": rows, "total": total}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--must-show":
        print(json.dumps(must_show(Path(sys.argv[2])), indent=1))
        return
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
