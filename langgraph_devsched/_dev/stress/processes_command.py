"""``devsched stress --processes N``: parse its fault rates, run it, print and write it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from langgraph_devsched._dev.stress.faults import parse_fault_rates
from langgraph_devsched._dev.stress.processes import (
    DEFAULT_PROCESS_RATES,
    PROCESS_FAULTS,
    ProcessStressReport,
    run_process_stress,
)


def parse_process_rates(items: Iterable[str]) -> dict[str, float]:
    """``KIND=P`` strings over `DEFAULT_PROCESS_RATES`; errors name the valid kinds.

    >>> parse_process_rates(["kill_call=0.01"])["kill_call"]
    0.01
    """
    return parse_fault_rates(items, DEFAULT_PROCESS_RATES, PROCESS_FAULTS)


def print_process_report(report: ProcessStressReport) -> None:
    from rich.console import Console

    console = Console()
    r = report
    console.print(f"devsched stress --processes {r.processes}: {r.calls} calls in {r.steps} "
                  f"steps, {r.spawned} processes spawned", highlight=False)
    console.print(f"answered {r.answered}, lost {r.lost}, duplicated {r.duplicated}, stray "
                  f"{r.stray}, error answers {r.error_answers} (injected)", highlight=False)
    console.print(f"killed {r.killed} processes: {r.killed_mid_call} mid-call, "
                  f"{r.killed_mid_load} mid-load ({r.killed_holding_vram} holding VRAM); "
                  f"reclaimed {r.reclaimed} ({r.reclaimed_by_workers} by a worker), p50 "
                  f"{r.reclaim_s_p50:.2f} s, max {r.reclaim_s_max:.2f} s (goal "
                  f"{r.reclaim_goal_s:g} s)", highlight=False)
    console.print(f"machine-wide ledger: peak {r.peak_mb:.0f} / {r.budget_mb:.0f} MB, end "
                  f"{r.end_mb:.0f} MB, {r.end_holders} holders; {r.at_rest_checked} processes "
                  f"checked at rest against their live models", highlight=False)
    asked = ", ".join(f"{k} {n}" for k, n in r.eviction_requests.items()) or "none"
    console.print(f"eviction requests: {asked}; {r.wall_s:.1f} s"
                  + (" (stopped by --max-seconds)" if r.stopped_early else ""), highlight=False)
    console.print("[green]OK[/]" if r.ok else f"[red]FAILED[/]: {len(r.violations)} violation(s)")
    for line in r.violations[:20]:
        console.print(f"  {line}", markup=False, highlight=False)


def run_process_stress_command(
    *, processes: int, calls: int, seed: int, fault_rates: Sequence[str] = (),
    max_seconds: float = 540.0, json_path: Path | None = None,
) -> ProcessStressReport:
    """What ``devsched stress --processes N`` does; raises `ValueError` on bad options."""
    rates = parse_process_rates(fault_rates)
    report = run_process_stress(processes=processes, calls=calls, seed=seed, rates=rates,
                                max_seconds=max_seconds)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(report.model_dump_json(indent=1), encoding="utf-8")
    print_process_report(report)
    return report
