"""The bench counts the agentic scheduler's consultations: valid answers and fallbacks by cause
(an agentic fallback is not a testbed fallback, and used to be invisible), one fallback count
everywhere, and the model's agreement with the classical policy and its deviations."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

import langgraph_devsched.bench.runner as runner
from langgraph_devsched.bench.agentic_stats import format_agentic
from langgraph_devsched.bench.report import to_json
from langgraph_devsched.bench.runner import run_benchmark
from langgraph_devsched.bench.scenario import load_scenarios
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.registry import registered
from tests.agentic_fakes import EveryCallAnswers, ToolScriptModel


def make_mute_agentic() -> AgenticScheduler:
    """A model that never answers a mapping: every consultation falls back."""
    model = ToolScriptModel(script=[AIMessage("I would rather not say.")])
    return AgenticScheduler(model, fallback="static", guard_ratio=None, timeout_s=5)


def test_agentic_fallbacks_and_causes_are_counted_per_scheduler() -> None:
    scenarios = [s for s in load_scenarios() if s.name == "serial_voice_assistant"]
    with registered("mute_agentic", "tests.test_bench_agentic_row:make_mute_agentic"):
        bench = run_benchmark(scenarios, ["mute_agentic", "static"], rounds=2)
    data: dict[str, Any] = to_json(bench)
    row = data["scenarios"][0]["results"]["mute_agentic"]["agentic"]
    assert row["consultations"] >= 1 and row["valid_answers"] == 0
    assert row["fallbacks"] and sum(row["fallbacks"].values()) == row["consultations"]
    assert data["summary"]["mute_agentic"]["agentic"]["consultations"] == row["consultations"]
    assert data["scenarios"][0]["results"]["static"]["agentic"] is None


def test_one_fallback_count_everywhere() -> None:
    """The result's ``fallbacks`` is the agentic fallbacks' total (it said 0 beside
    ``agentic.fallbacks: {timeout: 3}``); the testbed's OOM reruns are ``oom_fallbacks``."""
    scenarios = [s for s in load_scenarios() if s.name == "serial_voice_assistant"]
    with registered("mute_agentic", "tests.test_bench_agentic_row:make_mute_agentic"):
        bench = run_benchmark(scenarios, ["mute_agentic", "static"], rounds=2)
    results = to_json(bench)["scenarios"][0]["results"]
    mute = results["mute_agentic"]
    assert mute["fallbacks"] == sum(mute["agentic"]["fallbacks"].values()) > 0
    assert mute["oom_fallbacks"] == 0 and results["static"]["fallbacks"] == 0


def make_cpu_agentic() -> AgenticScheduler:
    return AgenticScheduler(EveryCallAnswers(value="cpu"), fallback="static", guard_ratio=None)


def test_agreement_and_deviations_are_reported_in_the_json_and_the_line() -> None:
    """serial_voice_assistant: static puts asr and tts on the GPU, vad on the CPU; a model
    answering cpu everywhere agrees on vad and deviates (and loses) on the other two."""
    scenarios = [s for s in load_scenarios() if s.name == "serial_voice_assistant"]
    with registered("cpu_agentic", "tests.test_bench_agentic_row:make_cpu_agentic"):
        bench = run_benchmark(scenarios, ["cpu_agentic"], rounds=2)
    row = to_json(bench)["scenarios"][0]["results"]["cpu_agentic"]["agentic"]
    assert row["compared"] == row["valid_answers"] == row["consultations"] >= 3
    assert row["agreed"] >= 1 and row["deviations"] == row["compared"] - row["agreed"] >= 2
    assert row["deviations_lost"] == row["deviations"] and row["deviation_won_ms"] < 0
    assert row["agreement_rate"] == row["agreed"] / row["compared"]
    summary = bench.scenarios[0].results["cpu_agentic"].agentic
    assert summary is not None
    line = format_agentic("cpu_agentic", summary)
    assert f"agreement with the policy {row['agreed']}/{row['compared']}" in line
    assert f"deviations {row['deviations']}: 0 won, {row['deviations_lost']} lost" in line


def test_each_deviation_is_also_judged_exactly_from_the_step_s_state() -> None:
    """The bench knows what the scheduler cannot: the policy's mapping's noise-free makespan
    from the very state the deviation ran in. Each deviation is judged that way too, beside
    the scheduler's own noisy judgement: a cpu-everywhere answer loses exactly, every time,
    what the testbed says it loses."""
    from langgraph_devsched.bench.agentic_stats import exact_policy_ms, ran_deviation

    seen: list[float] = []
    original = exact_policy_ms

    def spy(bed: Any, batch: Any, decision: Any) -> float | None:
        ms = original(bed, batch, decision)
        if ran_deviation(decision) is not None:
            assert ms is not None
            calls = [(c.call_id, c.tool, decision.mapping[c.call_id]) for c in batch.calls]
            seen.append(ms - bed.makespan(calls))
        return ms

    scenarios = [s for s in load_scenarios() if s.name == "serial_voice_assistant"]
    runner.exact_policy_ms = spy  # type: ignore[assignment]
    try:
        with registered("cpu_agentic", "tests.test_bench_agentic_row:make_cpu_agentic"):
            bench = run_benchmark(scenarios, ["cpu_agentic"], rounds=2)
    finally:
        runner.exact_policy_ms = original  # type: ignore[assignment]
    row = to_json(bench)["scenarios"][0]["results"]["cpu_agentic"]["agentic"]
    assert row["deviations_exact"] == row["deviations"] == len(seen) >= 2
    assert row["deviations_lost_exact"] == row["deviations"]
    assert abs(row["deviation_won_exact_ms"] - round(sum(seen), 3)) < 1e-6
    assert all(w < 0 for w in seen)
    summary = bench.scenarios[0].results["cpu_agentic"].agentic
    assert summary is not None
    assert (f"exactly (noise-free, from each step's state): 0 won, {len(seen)} lost"
            in format_agentic("cpu_agentic", summary))
