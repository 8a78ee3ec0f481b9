"""DeviceToolNode under ``Send("tools", [call])`` dispatch (what ``create_agent`` does): each
call is its own task, yet the step is planned once, from the model's message in the state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Send

from langgraph_devsched import DeviceToolNode, SimulatedTestbed, StepReport
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView
from tests.fakes import HINTS, PARAMS, TOOLS, calls


class Recording(SchedulerBase):
    name = "recording"

    def __init__(self) -> None:
        self.batches: list[tuple[str, ...]] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.batches.append(batch.call_ids)
        return self._decision({c.call_id: "gpu_queued" for c in batch.calls}, "queue all")


def send_graph(node: DeviceToolNode, step: AIMessage, answered: list[ToolMessage]) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [step, *answered]}

    def dispatch(state: MessagesState) -> list[Send]:
        done = {m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)}
        return [Send("tools", [c]) for c in step.tool_calls if c["id"] not in done]

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", dispatch, ["tools"])
    return builder.compile()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_send_dispatched_calls_share_one_plan(mode: str) -> None:
    scheduler = Recording()
    reports: list[StepReport] = []
    bed = SimulatedTestbed(PARAMS, vram_budget_mb=8000, cpu_cores=4)
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=scheduler, testbed=bed, on_step=reports.append
    )
    step = AIMessage("", tool_calls=calls("asr", "ocr", "embed"))
    graph = send_graph(node, step, [])
    inputs = {"messages": [HumanMessage("go")]}
    result = graph.invoke(inputs) if mode == "sync" else asyncio.run(graph.ainvoke(inputs))
    answers = sorted(
        (m.tool_call_id, m.content) for m in result["messages"] if isinstance(m, ToolMessage)
    )
    assert answers == [("c1", "asr:input 1"), ("c2", "ocr:input 2"), ("c3", "embed:input 3")]
    assert scheduler.batches == [("c1", "c2", "c3")]
    (report,) = reports
    assert report.record is not None
    # queued one after another on the GPU, in call order: one simulated step, not three
    assert [c.end_ms for c in report.record.calls] == [70.0, 115.0, 155.0]
    assert node.planner.open_steps == 0


def test_calls_already_answered_are_left_out_of_the_plan() -> None:
    scheduler = Recording()
    node = DeviceToolNode(
        TOOLS,
        hints=HINTS,
        scheduler=scheduler,
        testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
    )
    step = AIMessage("", tool_calls=calls("asr", "ocr", "embed"))
    answered = [ToolMessage("earlier", tool_call_id="c1", name="asr")]
    result = send_graph(node, step, answered).invoke({"messages": [HumanMessage("go")]})
    tool_ids = [m.tool_call_id for m in result["messages"] if isinstance(m, ToolMessage)]
    assert sorted(tool_ids) == ["c1", "c2", "c3"]
    assert scheduler.batches == [("c2", "c3")]
    assert node.planner.open_steps == 0  # the step closed: it did not wait for c1
