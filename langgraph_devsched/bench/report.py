"""Benchmark reports: the JSON document, the terminal tables (rich) and a Markdown summary.

The JSON keeps these names (a contract for scripts and CI): ``scenarios[].name``,
``category``, ``optimal_makespan_ms``, ``results.<scheduler>.final_mapping``,
``final_makespan_ms``, ``optimal``, ``rounds_to_optimal``, ``regret_ms``, ``llm_calls``, and
``summary.<scheduler>.optimal``, ``total``, ``regret_ms``; ``config.skipped`` maps each
scheduler left out to why (e.g. ``agentic`` without a configured LLM). Decision time:
``results.<scheduler>.round_wall_ms`` (decision + makespan per round), ``wall_regret_ms``,
``decision_ms_p50``, ``decision_ms_p95``, and the same in ``summary`` (percentiles over every
decision of the run); ``config.decision_cost`` says whether decision time counted in the wall
time. ``config.declare`` says what the tools declared (``exact``: the ground truth's solo
profiles, also ``config.ground_truth_declared``). Resident models: ``resident_models`` and
``reference_makespans_ms`` (each round's reference) per scenario, ``evictions_per_step`` and
``loads`` per result; a third table (`residency_table`) shows them where a scenario has
resident models. ``physics`` per scenario names the ground truth's contention physics;
``summary_by_physics.<physics>.<scheduler>`` (a run with several) has the summary's keys per
physics, and a fourth table (`physics_table`) shows it. Several GPUs: ``optimal_devices``
per scenario and ``final_devices`` per result map each call id to ``cuda:k`` or ``cpu``, and
a table (`bench.devices.devices_table`) shows the device of every call. Other keys are
extra.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from langgraph_devsched.bench.agentic_stats import merge
from langgraph_devsched.bench.devices import devices_table
from langgraph_devsched.bench.runner import (
    BenchResult,
    ScenarioResult,
    SchedulerResult,
    percentile,
)


def declare_label(bench: BenchResult) -> str:
    """What the tools declared, e.g. ``exact`` or ``noisy(0.3)``."""
    return bench.declare.label


def declare_ground_truth(bench: BenchResult) -> bool:
    """Whether the schedulers were fed the ground truth's exact solo profiles."""
    return bench.declare.ground_truth


DECLARE_CAPTIONS = {
    "exact": "declare=exact: tools declare their exact solo profiles (ground truth)",
    "none": "declare=none: tools declare no profile; schedulers start from nothing",
    "noisy": "tools declare noisy profiles (each latency times a log-normal factor)",
    "stale": "tools declare stale profiles (GPU latencies scaled, as on another GPU)",
}


def declare_caption(bench: BenchResult) -> str:
    """One plain sentence on what the schedulers were fed."""
    label = declare_label(bench)
    kind = label.split("(")[0]
    text = DECLARE_CAPTIONS.get(kind, "")
    return text if kind in ("exact", "none") else f"declare={label}: {text}"


def ratio(result: SchedulerResult, scenario: ScenarioResult) -> float:
    """Final noise-free makespan over the optimum (1.0 is optimal; with resident models the
    reference's final round: the least any sequence of mappings pays in it)."""
    best = scenario.optimal_makespan_ms
    return result.final_makespan_ms / best if best > 0 else 1.0


TOTAL_TOLERANCE = 0.01
"""A run whose total is within this of the whole-run reference is optimal on the total."""


def total_ratio(result: SchedulerResult) -> float:
    """The run's total over the whole-run reference's (1.0 without one)."""
    return result.total_ratio if result.total_ratio is not None else 1.0


def optimal_total(result: SchedulerResult) -> bool:
    """Whether the run's total is within `TOTAL_TOLERANCE` of the whole-run reference."""
    return total_ratio(result) <= 1 + TOTAL_TOLERANCE


def wall_regret(r: SchedulerResult) -> float:
    """Regret on wall time (decision + makespan); the makespan regret where rounds were not
    timed separately (e.g. the real benchmark)."""
    return r.wall_regret_ms if r.round_wall_ms else r.regret_ms


def decision_times(r: SchedulerResult) -> list[float]:
    """Every decision's time, or the median alone where only that was kept."""
    return list(r.decision_ms) if r.decision_ms else [r.decision_ms_median]


def physics_of(bench: BenchResult) -> list[str]:
    """The contention physics of the run's scenarios, in order of first appearance."""
    return list(dict.fromkeys(s.physics for s in bench.scenarios))


def summary(bench: BenchResult, *, physics: str | None = None) -> dict[str, dict[str, Any]]:
    """Per scheduler: scenarios solved optimally, total, regret (makespan and wall), mean
    ratio, LLM calls, decision time (median of the medians, p50 and p95 over all); with
    ``physics``, over that physics' scenarios alone."""
    out: dict[str, dict[str, Any]] = {}
    for name in bench.schedulers:
        rows = [(s, s.results[name]) for s in bench.scenarios if name in s.results
                and (physics is None or s.physics == physics)]
        times = [t for _, r in rows for t in decision_times(r)]
        totals = [total_ratio(r) for _, r in rows]
        out[name] = {
            "optimal": sum(r.optimal for _, r in rows),
            "optimal_total": sum(optimal_total(r) for _, r in rows),
            "total_ratio_p50": round(percentile(totals, 50), 4) if rows else None,
            "total_ratio_p95": round(percentile(totals, 95), 4) if rows else None,
            "total_ratio_max": round(max(totals), 4) if rows else None,
            "total": len(rows),
            "regret_ms": round(sum(r.regret_ms for _, r in rows), 3),
            "wall_regret_ms": round(sum(wall_regret(r) for _, r in rows), 3),
            "decision_ms_p50": round(percentile(times, 50), 4),
            "decision_ms_p95": round(percentile(times, 95), 4),
            "reused": sum(r.reused for _, r in rows),
            "mean_ratio": round(statistics.fmean(ratio(r, s) for s, r in rows), 4)
            if rows
            else None,
            "llm_calls": sum(r.llm_calls for _, r in rows),
            **{k: round(sum(_extra_runs(r)[k] for _, r in rows), 3)
               for k in _extra_runs(SchedulerResult(name, {}, 0.0, False, None, 0.0, 0, 0.0))},
            "agentic": (m.model_dump() if (m := merge(r.agentic for _, r in rows)) else None),
            "decision_ms_median": round(
                statistics.median(r.decision_ms_median for _, r in rows), 4
            )
            if rows
            else None,
        }
    return out


def _result_json(r: SchedulerResult, s: ScenarioResult) -> dict[str, Any]:
    return {
        "final_mapping": dict(r.final_mapping),
        "final_makespan_ms": round(r.final_makespan_ms, 3),
        "optimal": r.optimal,
        "rounds_to_optimal": r.rounds_to_optimal,
        "regret_ms": round(r.regret_ms, 3),
        "wall_regret_ms": round(wall_regret(r), 3),
        "llm_calls": r.llm_calls,
        "makespan_ratio": round(ratio(r, s), 4),
        "decision_ms_median": round(r.decision_ms_median, 4),
        "decision_ms_p50": round(percentile(decision_times(r), 50), 4),
        "decision_ms_p95": round(percentile(decision_times(r), 95), 4),
        "reused": r.reused,
        "agentic": r.agentic.model_dump() if r.agentic is not None else None,
        "words": r.words,
        "probes": r.probes,
        # one count of the scheduler's fallbacks (the agentic consultations that fell back,
        # the same as the sum of ``agentic.fallbacks``); the testbed's OOM reruns on the CPU
        # are another thing, counted apart
        "fallbacks": sum(r.agentic.fallbacks.values()) if r.agentic is not None else 0,
        "oom_fallbacks": r.fallbacks,
        "evictions_per_step": round(r.evictions_per_step, 4),
        "loads": r.loads,
        "round_makespans_ms": [round(x, 3) for x in r.round_makespans_ms],
        "total_ms": round(r.total_ms, 3),
        "total_ratio": round(total_ratio(r), 4),
        "optimal_total": optimal_total(r),
        "measured_makespans_ms": [round(x, 3) for x in r.measured_makespans_ms],
        "round_wall_ms": [round(x, 3) for x in r.round_wall_ms],
        "below_reference": list(r.below_reference),
        **_extra_runs(r),
        **({"final_devices": dict(r.final_devices)} if r.final_devices else {}),
    }


def _extra_runs(r: SchedulerResult) -> dict[str, Any]:
    """The side-effect-free tools' extra runs: hedges (inside the regret) and idle-time
    calibration (outside every step's wall time)."""
    return {"hedges": r.hedges, "hedge_cost_ms": round(r.hedge_cost_ms, 3),
            "hedge_device_ms": round(r.hedge_device_ms, 3), "idle_runs": r.idle_runs,
            "idle_cut": r.idle_cut, "idle_device_ms": round(r.idle_device_ms, 3),
            "preloads": r.preloads, "preload_device_ms": round(r.preload_device_ms, 3),
            "preload_saved_ms": round(r.preload_saved_ms, 3),
            "preloads_wasted": r.preloads_wasted,
            "preload_wasted_ms": round(r.preload_wasted_ms, 3),
            "preloads_beside": r.preloads_beside,
            "preload_delay_ms": round(r.preload_delay_ms, 3)}


def beaten_lines(bench: BenchResult) -> list[str]:
    """One line per (scenario, scheduler) that ended a round below the reference (a ratio
    under `runner.BELOW_REFERENCE`): the reference is then not a lower bound, a defect."""
    out = []
    for s in bench.scenarios:
        for name, rounds in s.below_reference().items():
            spans = s.results[name].round_makespans_ms
            r = min(rounds, key=lambda k: spans[k - 1] / s.reference_makespans_ms[k - 1])
            out.append(
                f"REFERENCE BEATEN: {s.name} · {name} round {r}: {spans[r - 1]:,.1f} ms < "
                f"reference {s.reference_makespans_ms[r - 1]:,.1f} ms (rounds {rounds})"
                + ("" if s.reference_exact else "; the reference's search hit its budget"))
    return out


def to_json(bench: BenchResult) -> dict[str, Any]:
    """The whole run as a JSON-ready dict (see the module docstring for the contract)."""
    return {
        "config": {
            "schedulers": list(bench.schedulers),
            "rounds": bench.rounds,
            "seed": bench.seed,
            "noise": bench.noise,
            "skipped": dict(bench.skipped),
            "decision_cost": bench.decision_cost,
            "declare": declare_label(bench),
            "ground_truth_declared": declare_ground_truth(bench),
        },
        "scenarios": [
            {
                "name": s.name,
                "category": s.category,
                "rounds": s.rounds,
                "optimal_makespan_ms": round(s.optimal_makespan_ms, 3),
                "optimal_mapping": dict(s.optimal_mapping),
                "resident_models": s.resident_models,
                "reference_makespans_ms": [round(x, 3) for x in s.reference_makespans_ms],
                "reference_exact": s.reference_exact,
                "total_reference_ms": round(s.total_reference_ms, 3),
                "total_reference_exact": s.total_reference_exact,
                "results": {name: _result_json(r, s) for name, r in s.results.items()},
                "physics": s.physics,
                **({"optimal_devices": dict(s.optimal_devices)} if s.optimal_devices else {}),
            }
            for s in bench.scenarios
        ],
        "summary": summary(bench),
        **({"summary_by_physics": {p: summary(bench, physics=p) for p in physics_of(bench)}}
           if len(physics_of(bench)) > 1 else {}),
    }


def write_json(bench: BenchResult, path: str | Path) -> Path:
    """Write `to_json` to ``path`` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(bench), indent=2) + "\n", encoding="utf-8")
    return path


def _cell(r: SchedulerResult, s: ScenarioResult) -> str:
    mark = "[green]✓[/]" if r.optimal else "[red]✗[/]"
    return f"{mark} {ratio(r, s):.2f}× {r.regret_ms:,.0f}"


def _mark(r: SchedulerResult) -> str:
    return "[green]✓[/]" if r.optimal else "[red]✗[/]"


def wide_width(bench: BenchResult) -> int:
    """Columns the wide per-scenario table needs (one column per scheduler)."""
    label = max((len(s.name) + len(s.category) + 3 for s in bench.scenarios), default=8)
    cells = [
        max([len(n)] + [len(f"✓ {ratio(s.results[n], s):.2f}× {s.results[n].regret_ms:,.0f}")
                        for s in bench.scenarios if n in s.results])
        for n in bench.schedulers
    ]
    return 1 + (label + 3) + (len("optimum ms") + 3) + sum(c + 3 for c in cells)


def tables(bench: BenchResult, *, width: int | None = None) -> list[Any]:
    """Two rich tables: per scenario (optimal? ratio, regret) and the summary.

    Where the wide per-scenario table (a column per scheduler) would not fit in ``width``
    columns, it is printed long: a row per (scenario, scheduler), so no figure is cut."""
    from rich.table import Table

    caption = declare_caption(bench)
    title = "Final mapping vs brute-force optimum (✓ optimal · ratio · regret ms)"
    if width is None or wide_width(bench) <= width:
        per = Table(title=title, caption=caption)
        per.add_column("scenario", no_wrap=True)
        per.add_column("optimum ms", justify="right")
        for name in bench.schedulers:
            per.add_column(name, justify="right", no_wrap=True)
        for s in bench.scenarios:
            per.add_row(
                f"{s.name} [dim]({s.category})[/]",
                f"{s.optimal_makespan_ms:,.1f}",
                *(_cell(s.results[n], s) if n in s.results else "" for n in bench.schedulers),
            )
    else:
        per = Table(title="Final mapping vs brute-force optimum", caption=caption)
        for col in ("scenario", "optimum ms", "scheduler", "optimal", "ratio", "regret ms",
                    "round"):
            per.add_column(col, justify="left" if col in ("scenario", "scheduler") else "right",
                           no_wrap=True)
        for s in bench.scenarios:
            names = [n for n in bench.schedulers if n in s.results]
            for i, n in enumerate(names):
                r = s.results[n]
                per.add_row(
                    s.name if i == 0 else "",
                    f"{s.optimal_makespan_ms:,.1f}" if i == 0 else "",
                    n, _mark(r), f"{ratio(r, s):.2f}×", f"{r.regret_ms:,.0f}",
                    "—" if r.rounds_to_optimal is None else str(r.rounds_to_optimal),
                    end_section=i == len(names) - 1,
                )
    wall = "wall regret ms" + (" (no decision cost)" if bench.decision_cost == "none" else "")
    summ = Table(title="Summary (wall = decision time + makespan)", caption=caption)
    for col in ("scheduler", "optimal (final)", "regret ms", wall, "mean ratio",
                "decision p50 ms", "decision p95 ms", "LLM calls"):
        summ.add_column(col, justify="left" if col == "scheduler" else "right",
                        overflow="fold")
    for name, row in summary(bench).items():
        summ.add_row(
            name,
            f"{row['optimal']}/{row['total']}",
            f"{row['regret_ms']:,.0f}",
            f"{row['wall_regret_ms']:,.0f}",
            f"{row['mean_ratio']:.3f}",
            f"{row['decision_ms_p50']:.3f}",
            f"{row['decision_ms_p95']:.3f}",
            str(row["llm_calls"]),
        )
    out = [per, summ]
    if any(s.resident_models for s in bench.scenarios):  # else each round stands alone
        out.append(whole_run_table(bench, caption=caption))
    extra = hedge_table(bench, caption=caption)
    if extra is not None:
        out.append(extra)
    loads = preload_table(bench, caption=caption)
    if loads is not None:
        out.append(loads)
    resident = residency_table(bench, caption=caption)
    if resident is not None:
        out.append(resident)
    by_physics = physics_table(bench, caption=caption)
    if by_physics is not None:
        out.append(by_physics)
    devices = devices_table(bench, caption=caption)
    if devices is not None:
        out.append(devices)
    return out


def whole_run_table(bench: BenchResult, *, caption: str = "") -> Any:
    """Per scheduler: the runs optimal on the total (within `TOTAL_TOLERANCE` of the
    whole-run reference) and the distribution of the total ratio."""
    from rich.table import Table

    table = Table(title="Whole run (Σ: each run's total over the whole-run reference)",
                  caption=caption)
    for col in ("scheduler", "optimal (total)", "Σ ratio p50", "p95", "max"):
        table.add_column(col, justify="left" if col == "scheduler" else "right")
    for name, r in summary(bench).items():
        if r["total_ratio_p50"] is None:
            continue
        table.add_row(name, f"{r['optimal_total']}/{r['total']}",
                      f"{r['total_ratio_p50']:.3f}", f"{r['total_ratio_p95']:.3f}",
                      f"{r['total_ratio_max']:.3f}")
    return table


def preload_table(bench: BenchResult, *, caption: str = "") -> Any:
    """Per scheduler that ran any: the model loads off the critical path (between steps,
    while the agent's LLM thinks, or beside a step), how many ran beside a step, their
    device time, the loads later steps did not pay, what loads beside a step delayed the
    next one by, and the wasted ones (evicted or never used, or cut by the next step); else
    None."""
    from rich.table import Table

    rows = {n: r for n, r in summary(bench).items() if r["preloads"]}
    if not rows:
        return None
    table = Table(title="Loads off the critical path", caption=caption)
    for col in ("scheduler", "loads", "beside a step", "device ms", "saved ms", "delay ms",
                "wasted", "wasted ms"):
        table.add_column(col, justify="left" if col == "scheduler" else "right")
    for name, r in rows.items():
        table.add_row(name, f"{r['preloads']:.0f}", f"{r['preloads_beside']:.0f}",
                      f"{r['preload_device_ms']:,.0f}", f"{r['preload_saved_ms']:,.0f}",
                      f"{r['preload_delay_ms']:,.0f}", f"{r['preloads_wasted']:.0f}",
                      f"{r['preload_wasted_ms']:,.0f}")
    return table


def hedge_table(bench: BenchResult, *, caption: str = "") -> Any:
    """Per scheduler that ran any: the hedges (calls run on both sides), what they added to
    the noise-free makespans (inside the regret) and their losers' device time, and the
    idle-time runs between steps (how many, how many cut, device time); else None."""
    from rich.table import Table

    rows = {n: r for n, r in summary(bench).items() if r["hedges"] or r["idle_runs"]}
    if not rows:
        return None
    table = Table(title="Side-effect-free tools' extra runs", caption=caption)
    for col in ("scheduler", "hedges", "hedge cost ms", "loser device ms", "idle runs",
                "idle cut", "idle device ms"):
        table.add_column(col, justify="left" if col == "scheduler" else "right")
    for name, r in rows.items():
        table.add_row(name, f"{r['hedges']:.0f}", f"{r['hedge_cost_ms']:,.0f}",
                      f"{r['hedge_device_ms']:,.0f}", f"{r['idle_runs']:.0f}",
                      f"{r['idle_cut']:.0f}", f"{r['idle_device_ms']:,.0f}")
    return table


def physics_table(bench: BenchResult, *, caption: str = "") -> Any:
    """A run over several contention physics: per physics and scheduler, optimal/total and
    the mean ratio; None when the run has one physics."""
    from rich.table import Table

    names = physics_of(bench)
    if len(names) < 2:
        return None
    table = Table(title="Per physics (optimal · mean ratio)", caption=caption)
    table.add_column("physics", no_wrap=True)
    for name in bench.schedulers:
        table.add_column(name, justify="right", no_wrap=True)
    for p in names:
        rows = summary(bench, physics=p)
        table.add_row(p, *(f"{r['optimal']}/{r['total']} · {r['mean_ratio']:.3f}"
                           if (r := rows[n])["total"] else "" for n in bench.schedulers))
    return table


def physics_markdown(bench: BenchResult) -> str:
    """Scenario x physics as Markdown: per scenario a row, per physics a column group of
    the schedulers' final ratio (✓ optimal), then the per-physics summary rows."""
    names = physics_of(bench)
    base = list(dict.fromkeys(s.name.split("@")[0] for s in bench.scenarios))
    cells = {(s.name.split("@")[0], s.physics): s for s in bench.scenarios}
    head = [f"{p} {n}" for p in names for n in bench.schedulers]
    lines = ["| scenario | " + " | ".join(head) + " |",
             "| --- | " + " | ".join("---:" for _ in head) + " |"]
    for b in base:
        row = []
        for p in names:
            s = cells.get((b, p))
            for n in bench.schedulers:
                r = None if s is None else s.results.get(n)
                row.append("" if r is None or s is None else
                           f"{'✓' if r.optimal else '✗'} {ratio(r, s):.3f}")
        lines.append(f"| {b} | " + " | ".join(row) + " |")
    summ = ["| **optimal · mean ratio** | " + " | ".join(
        f"{r['optimal']}/{r['total']} · {r['mean_ratio']:.3f}"
        for p in names for r in (summary(bench, physics=p)[n] for n in bench.schedulers)) + " |"]
    return "\n".join(lines + summ) + "\n"


def residency_table(bench: BenchResult, *, caption: str = "") -> Any:
    """Scenarios with resident models: per scheduler the ratio to the reference's final round,
    evictions per step, loads and the total ratio (Σ: the run's total over the whole-run
    reference); None when no scenario has resident models."""
    from rich.table import Table

    scenarios = [s for s in bench.scenarios if s.resident_models]
    if not scenarios:
        return None
    table = Table(title="Resident models (ratio to the reference's final round · evictions/step · "
                  "loads · Σ total ratio)", caption=caption)
    table.add_column("scenario", no_wrap=True)
    for name in bench.schedulers:
        table.add_column(name, justify="right", no_wrap=True)
    for s in scenarios:
        table.add_row(s.name, *(
            f"{ratio(r, s):.2f}× {r.evictions_per_step:.2f} {r.loads} Σ{total_ratio(r):.2f}×"
            if (r := s.results.get(n)) is not None else "" for n in bench.schedulers))
    return table


def residency_markdown(bench: BenchResult) -> str:
    """`residency_table` as Markdown: ratio to the reference's final round, evictions per step,
    the total ratio."""
    scenarios = [s for s in bench.scenarios if s.resident_models]
    lines = ["| scenario | " + " | ".join(bench.schedulers) + " |",
             "| --- | " + " | ".join("---:" for _ in bench.schedulers) + " |"]
    for s in scenarios:
        cells = [f"{ratio(r, s):.2f}× · {r.evictions_per_step:.2f} · Σ{total_ratio(r):.2f}×"
                 if (r := s.results.get(n)) is not None else "" for n in bench.schedulers]
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_summary(bench: BenchResult) -> str:
    """The summary and per-scenario results as Markdown tables (for docs)."""
    lines = [
        "| scheduler | optimal | regret ms | wall regret ms | mean ratio | decision p50 ms | "
        "decision p95 ms | LLM calls |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in summary(bench).items():
        lines.append(
            f"| {name} | {row['optimal']}/{row['total']} | {row['regret_ms']:,.0f} | "
            f"{row['wall_regret_ms']:,.0f} | {row['mean_ratio']:.3f} | "
            f"{row['decision_ms_p50']:.3f} | {row['decision_ms_p95']:.3f} | "
            f"{row['llm_calls']} |"
        )
    lines += ["", "| scenario | optimum ms | " + " | ".join(bench.schedulers) + " |"]
    lines.append("| --- | ---: | " + " | ".join("---:" for _ in bench.schedulers) + " |")
    for s in bench.scenarios:
        cells = []
        for n in bench.schedulers:
            r = s.results[n]
            cells.append(f"{'✓' if r.optimal else '✗'} {ratio(r, s):.2f}×")
        lines.append(f"| {s.name} | {s.optimal_makespan_ms:,.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
