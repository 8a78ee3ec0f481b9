"""``devsched stress --processes N``: real spawned processes against one declared GPU and the
machine-wide ledger, killed mid-call and mid-load (a short run through the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from langgraph_devsched._dev.stress.processes import make_steps, run_process_stress
from langgraph_devsched.cli import app


def test_processes_killed_mid_call_and_mid_load_lose_nothing() -> None:
    rates = {"kill_call": 0.1, "kill_load": 0.1, "error": 0.1, "slow": 0.05}
    steps = make_steps(calls=30, seed=3, rates=rates)
    planned = [f for _, calls in steps for _c, _t, f in calls if f.startswith("kill")]
    assert sorted(planned) == ["kill_call", "kill_load"]
    # how fast a kill is seen depends on the machine: the test's goal is loose on purpose
    report = run_process_stress(processes=2, calls=30, seed=3, rates=rates,
                                reclaim_goal_s=600.0).model_dump()
    assert report["violations"] == []
    assert (report["answered"], report["lost"], report["duplicated"]) == (30, 0, 0)
    assert (report["killed_mid_call"], report["killed_mid_load"]) == (1, 1)
    assert report["killed_holding_vram"] == 2 and report["reclaimed"] == 2
    assert report["spawned"] == 4  # two slots, each worker killed once and replaced
    assert report["peak_mb"] <= report["budget_mb"] == 2000.0
    assert (report["end_mb"], report["end_holders"]) == (0.0, 0)
    assert report["at_rest_checked"] == 2
    assert report["error_answers"] == sum(
        1 for _, calls in steps for _c, _t, f in calls if f == "error")


def test_the_cli_writes_the_report_and_exits_on_its_verdict(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    args = ["stress", "--processes", "1", "--calls", "6", "--seed", "0", "--json", str(out)]
    for rate in ("kill_call=0", "kill_load=0", "error=0.5", "slow=0"):
        args += ["--fault-rate", rate]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert (report["answered"], report["lost"], report["spawned"]) == (6, 0, 1)
    assert report["rates"]["error"] == 0.5 and report["error_answers"] >= 1
    assert "lost 0, duplicated 0" in result.output


def test_bad_process_fault_kind_names_the_valid_ones() -> None:
    result = CliRunner().invoke(app, ["stress", "--processes", "2", "--fault-rate", "hang=0.1"])
    assert result.exit_code == 2
    assert "kill_call, kill_load, error, slow" in result.output


def test_the_verdict_names_each_broken_check(tmp_path: Path) -> None:
    """The checks can fail: a run whose answers, store and rest rows are broken on purpose."""
    import multiprocessing as mp

    from langgraph_devsched._dev.stress import processes as ps
    from langgraph_devsched.shared_ledger import Reclaimed, StoreSnapshot

    steps = [(0, [("s0c0", "embed", ""), ("s0c1", "embed", "")]),
             (1, [("s1c0", "embed", "kill_call")])]
    run = ps._Run(1, steps, tmp_path, mp.get_context("spawn"))
    run.answers = {"s0c0": [("s0c0@cuda:0:emb", "success")] * 2,  # duplicated
                   "s1c0": [("s0c1@cpu:emb", "success")]}  # stray; s0c1 lost
    run.kills = [{"kill": 1, "mode": "call", "at": 100.0, "pid": 7},
                 {"kill": 1, "mode": "load", "at": 100.0, "pid": 8}]
    run.rests = [{"store_weights": ["asr"], "instances": [], "work_mb": 0.0, "in_use": 0,
                  "active": 0, "queued": 0}]
    snap = StoreSnapshot(gpus={"gpu0": (2000.0, 2100.0)},
                         holds=[("h", "gpu0", "work", "", 100.0, 1)], holders={},
                         reclaimed=[Reclaimed("x", 7, "gpu0", 100.0, 106.0, "w")],
                         counters={}, open_requests=0)
    report = ps.ProcessStressReport(processes=1, calls=3, seed=0, rates={})
    ps._check(report, run, steps, snap, "harness", "gpu0")
    text = "\n".join(report.violations)
    assert (report.lost, report.duplicated, report.stray) == (1, 1, 1)
    for phrase in ("never answered", "answered more than once", "answered 's0c1@cpu:emb'",
                   "process 8 killed mid-load was never reclaimed",
                   "reclaimed after more than 5 s", "over the 2000 MB budget",
                   "not back to 0", "at rest the store and the live instances differ"):
        assert phrase in text
    assert not report.ok
