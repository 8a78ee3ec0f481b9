"""The bench counts the agentic scheduler's consultations: valid answers and fallbacks by cause
(an agentic fallback is not a testbed fallback, and used to be invisible)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from langgraph_devsched.bench.report import to_json
from langgraph_devsched.bench.runner import run_benchmark
from langgraph_devsched.bench.scenario import load_scenarios
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.registry import registered
from tests.agentic_fakes import ToolScriptModel


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
