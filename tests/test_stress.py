"""`devsched stress`: a small run through the CLI, its option errors, and its own checker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from typer.testing import CliRunner

from langgraph_devsched._dev.stress import FAULT_KINDS, StressConfig, parse_fault_rates, run_stress
from langgraph_devsched._dev.stress.checks import Checker
from langgraph_devsched._dev.stress.faults import PROBE_FAULTS
from langgraph_devsched.cli import app

runner = CliRunner()

# high rates so that 300 calls (about 35 steps) hit every kind of the first harness; the
# issue-12 kinds (scheduler_returns and the scenario probes) have their own tests in
# tests/test_stress_probes.py
OLD_KINDS = (
    "tool_error", "gpu_oom", "slow", "hang", "bad_call", "cancel", "scheduler_error",
    "invalid_decision", "llm_garbage", "llm_error", "llm_hang", "corrupt_stats",
)
HEAVY = [
    "tool_error=0.1", "gpu_oom=0.2", "slow=0.05", "hang=0.05", "bad_call=0.1",
    *(f"{k}=0.14" for k in ("cancel", "scheduler_error", "invalid_decision", "llm_garbage",
                            "llm_error", "llm_hang", "corrupt_stats")),
    "scheduler_returns=0", *(f"{k}=0" for k in PROBE_FAULTS),
]


def test_stress_cli_300_calls_loses_nothing_and_injects_every_fault(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    args = ["stress", "--calls", "300", "--seed", "2", "--json", str(out)]
    for item in HEAVY:
        args += ["--fault-rate", item]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert report["calls"] == 300 == report["answered"]
    assert report["lost"] == report["duplicated"] == report["stray"] == 0
    assert report["violations"] == 0, report["violation_examples"]
    assert {ledger["backend"] for ledger in report["ledgers"]} == {"simulated", "local"}
    for ledger in report["ledgers"]:
        assert 0 < ledger["peak_mb"] <= ledger["budget_mb"]
        assert ledger["end_mb"] == 0 and ledger["end_active"] == ledger["end_queued"] == 0
    faults = {f["kind"]: f for f in report["faults"]}
    assert set(faults) == set(FAULT_KINDS)
    assert report["faults_injected"] == {k: f["injected"] for k, f in faults.items()}
    for kind in OLD_KINDS:
        f = faults[kind]
        assert f["injected"] >= 1, kind
        assert f["handled"] == f["injected"], kind
    assert all(faults[k]["injected"] == 0 for k in set(FAULT_KINDS) - set(OLD_KINDS))
    assert report["fallbacks"]["scheduler_error"] > 0
    assert report["fallbacks"]["invalid_decision"] > 0
    assert report["fallbacks"]["oom"] > 0  # the simulated and the local ones
    assert {"llm_error", "timeout"} <= set(report["agentic_causes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "gpu"], "unknown backend 'gpu'; valid backends: simulated, local, both"),
        (["--fault-rate", "nope=0.1"], "unknown fault kind 'nope'; valid kinds: tool_error,"),
        (["--fault-rate", "hang"], "expected KIND=P, e.g. hang=0.02"),
        (["--fault-rate", "hang=2"], "a rate is a probability in [0, 1]"),
        (["--fault-rate", "hang=lots"], "'lots' is not a number"),
        (["--fault-rate", "cancel=0.9", "--fault-rate", "llm_hang=0.9"],
         "step fault rates sum to"),
    ],
)
def test_stress_cli_rejects_bad_options_with_the_valid_values(
    args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["stress", "--calls", "5", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_stress_stops_by_itself_at_max_seconds() -> None:
    rates = dict.fromkeys(FAULT_KINDS, 0.0)  # the stop is the point, not the faults
    report = run_stress(
        # no faults: a node deadline no ordinary call comes near, however loaded the machine
        StressConfig(calls=10**7, max_seconds=1.0, backend="simulated", rates=rates,
                     node_call_timeout_s=30.0)
    )
    assert report.stopped_early
    assert 0 < report.calls < 10**7
    assert report.lost == report.duplicated == 0 and report.ok


def test_rates_default_and_override() -> None:
    rates = parse_fault_rates(["hang=0"])
    assert rates["hang"] == 0 and set(rates) == set(FAULT_KINDS)
    quiet = run_stress(
        StressConfig(calls=30, backend="simulated", rates=dict.fromkeys(FAULT_KINDS, 0.0),
                     node_call_timeout_s=30.0)
    )
    assert all(f.injected == 0 for f in quiet.faults) and quiet.error_answers == 0


def _answer(cid: str, text: str = "x") -> ToolMessage:
    return ToolMessage(text, tool_call_id=cid)


def test_the_checker_counts_lost_duplicated_and_stray_answers() -> None:
    """The harness's own checks must be able to fail: feed them broken answers."""
    run = Checker(fired={})
    calls: list[dict[str, Any]] = [
        {"name": "asr", "args": {"payload": c, "fault": "none"}, "id": c}
        for c in ("a", "b", "c")
    ]
    planned = dict.fromkeys(["a", "b", "c"], "none")
    messages = [_answer("a", "asr:a@cpu"), _answer("a", "asr:a@cpu"), _answer("zz"),
                _answer("c", "ocr:c@cpu")]
    run.check_answers(calls, planned, messages)
    assert (run.lost, run.duplicated, run.stray) == (1, 1, 1)
    assert run.violations == 4  # a duplicated, zz stray, b lost, c answered by another tool
    assert any("got no answer" in v for v in run.violation_examples)
    assert any("unexpected answer 'ocr:c@cpu'" in v for v in run.violation_examples)


def test_stress_on_several_gpus_prints_one_ledger_line_per_gpu(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    args = ["stress", "--gpus", "2", "--calls", "60", "--seed", "3", "--json", str(out)]
    for kind in PROBE_FAULTS:
        args += ["--fault-rate", f"{kind}=0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    got = [(x["backend"], x["device"], x["budget_mb"]) for x in report["ledgers"]]
    assert sorted(got) == [("local", "cuda:0", 8000.0), ("local", "cuda:1", 4000.0),
                           ("simulated", "cuda:0", 8000.0), ("simulated", "cuda:1", 4000.0)]
    for ledger in report["ledgers"]:  # each GPU against its own budget
        assert ledger["peak_mb"] <= ledger["budget_mb"] and ledger["end_mb"] == 0
    lines = [line for line in result.output.splitlines() if line.startswith("ledger ")]
    assert len(lines) == 4 and any(line.startswith("ledger local cuda:1: ") for line in lines)
    assert "/ 4000 MB" in "\n".join(lines)
