"""What a user reads: refused calls recorded and traced, warnings at construction, the
decision as a traced run, INFO logs, the step report as text."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend, StepReport, device_hints
from langgraph_devsched._node.step_text import format_step_report
from langgraph_devsched.tracing import iter_runs


@device_hints(vram_mb=12000, cpu_allowed=False)
@tool
def huge(text: str) -> str:
    """Needs more VRAM than there is."""
    return "ran"


@device_hints(vram_mb=500)
@tool
def small(text: str) -> str:
    """Fits."""
    return "ran"


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*calls: tuple[str, str]) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": {"text": i}, "id": i} for n, i in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def test_a_tool_that_can_never_fit_is_warned_about_at_construction() -> None:
    with pytest.warns(UserWarning, match=r"'huge' declares vram_mb=12000 .* at most 8000 MB"):
        DeviceToolNode([huge, small], backend=LocalBackend(gpu=GpuConfig(8000)))


def test_the_warning_knows_a_simulated_gpus_budget_too() -> None:
    from langgraph_devsched import SimulatedTestbed, ToolParams

    bed = SimulatedTestbed(
        {
            "huge": ToolParams(cpu_ms=10, gpu_ms=1, vram_mb=12000),
            "small": ToolParams(cpu_ms=10, gpu_ms=1),
        },
        vram_budget_mb=8000,
    )
    with pytest.warns(UserWarning, match=r"'huge' declares vram_mb=12000 .* at most 8000 MB"):
        DeviceToolNode([huge, small], testbed=bed)


def test_a_refused_call_is_recorded_with_device_none_and_traced_with_its_cause() -> None:
    reports: list[StepReport] = []
    with pytest.warns(UserWarning):
        node = DeviceToolNode(
            [huge, small], backend=LocalBackend(gpu=GpuConfig(8000)), on_step=reports.append
        )
    with collect_runs() as runs:
        out = graph_of(node).invoke(step(("huge", "h"), ("small", "s")))
    answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers["h"].status == "error" and "hints forbid the CPU" in str(answers["h"].content)
    record = reports[0].record
    assert record is not None
    refused = record.by_id()["h"]
    assert (refused.device, refused.fallback) == ("none", "vram_over_budget")
    tool_runs = {r.name: r for r in iter_runs(runs.traced_runs) if r.run_type == "tool"}
    meta = tool_runs["huge"].extra["metadata"]
    assert meta["devsched.fallback"] == "vram_over_budget" and meta["devsched.device"] == "none"
    assert tool_runs["huge"].error


def test_the_decision_is_its_own_traced_run_and_an_info_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = DeviceToolNode([small], backend=LocalBackend(gpu=GpuConfig(8000)))
    with caplog.at_level(logging.INFO, logger="langgraph_devsched"), collect_runs() as runs:
        graph_of(node).invoke(step(("small", "a"), ("small", "b")))
    (decide,) = [r for r in iter_runs(runs.traced_runs) if r.name == "devsched.decide"]
    assert [c["id"] for c in decide.inputs["calls"]] == ["a", "b"]
    assert set(decide.outputs["mapping"]) == {"a", "b"}
    assert any("step decided by monitor: a=" in r.getMessage() for r in caplog.records)


def test_a_step_report_reads_as_text() -> None:
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [small], backend=LocalBackend(gpu=GpuConfig(8000)), on_step=reports.append
    )
    graph_of(node).invoke(step(("small", "a")))
    text = format_step_report(reports[0], budget_mb=8000)
    assert text.startswith("step: scheduler=")
    assert "  a     small" in text and "of 8000 MB" in text
