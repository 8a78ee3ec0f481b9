"""The bench counts the agentic scheduler's consultations: valid answers and fallbacks by cause
(an agentic fallback is not a testbed fallback, and used to be invisible), one fallback count
everywhere, and the model's agreement with the classical policy and its deviations."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

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
