"""DeviceToolNode through compiled graphs: joint decisions, placements, answers, fallbacks."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import (
    DeviceToolNode,
    InjectedDevice,
    SimulatedTestbed,
    StepReport,
    current_placement,
    device_hints,
)
from langgraph_devsched.schedulers import (
    AllGpuScheduler,
    Batch,
    Decision,
    SchedulerBase,
    SchedulerView,
)
from tests.fakes import HINTS, PARAMS, TOOLS, ScriptedChatModel, calls


class Recording(SchedulerBase):
    """Records every batch it is asked about; answers a fixed mapping by tool name."""

    name = "recording"

    def __init__(self, by_tool: dict[str, Any]) -> None:
        self.by_tool = by_tool
        self.batches: list[Batch] = []
        self.observed: list[Any] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.batches.append(batch)
        return self._decision({c.call_id: self.by_tool[c.tool] for c in batch.calls}, "fixed")

    def observe(self, batch: Batch, decision: Decision, record: Any) -> None:
        self.observed.append(record)


def react_graph(node: DeviceToolNode, script: list[AIMessage]):
    model = ScriptedChatModel(script=script)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile()


def bed(vram: float = 4000) -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=vram, cpu_cores=4)


SCRIPT = [AIMessage("", tool_calls=calls("asr", "ocr", "embed")), AIMessage("done")]


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_graph_runs_every_call_once_with_the_joint_decision(mode: str):
    scheduler = Recording({"asr": "gpu_now", "ocr": "cpu", "embed": "gpu_queued"})
    reports: list[StepReport] = []
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=scheduler, testbed=bed(), on_step=reports.append
    )
    graph = react_graph(node, SCRIPT)
    inputs = {"messages": [HumanMessage("go")]}
    result = graph.invoke(inputs) if mode == "sync" else asyncio.run(graph.ainvoke(inputs))
    msgs = tool_messages(result)
    assert [(m.tool_call_id, m.content) for m in msgs] == [
        ("c1", "asr:input 1"),
        ("c2", "ocr:input 2"),
        ("c3", "embed:input 3"),
    ]
    assert result["messages"][-1].content == "done"
    # one decision for the whole step, seen before any call started
    assert len(scheduler.batches) == 1
    assert scheduler.batches[0].call_ids == ("c1", "c2", "c3")
    (report,) = reports
    record = report.record
    assert record is not None
    placed = {c.call_id: (c.device, c.fallback, c.end_ms) for c in record.calls}
    assert placed == {
        "c1": ("cuda:0", None, 70.0),
        "c2": ("cpu", None, 300.0),
        "c3": ("cuda:0", None, 40.0),
    }
    assert record.makespan_ms == 300.0
    assert scheduler.observed == [record]


def test_tools_learn_their_device_by_injection_and_by_accessor():
    seen: dict[str, Any] = {}

    @device_hints(vram_mb=100)
    @tool
    def aware(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """A device-aware tool."""
        placement = current_placement()
        seen[text] = (device, placement.option if placement else None)
        return device

    assert "device" not in aware.tool_call_schema.model_json_schema()["properties"]
    params = {"aware": PARAMS["asr"]}
    node = DeviceToolNode(
        [aware],
        scheduler=Recording({"aware": "gpu_now"}),
        testbed=SimulatedTestbed(params, vram_budget_mb=4000),
    )
    forged = [{"name": "aware", "args": {"text": "x", "device": "cuda:7"}, "id": "1"}]
    graph = react_graph(node, [AIMessage("", tool_calls=forged), AIMessage("ok")])
    result = graph.invoke({"messages": [HumanMessage("go")]})
    assert tool_messages(result)[0].content == "cuda:0"  # the model cannot forge the device
    assert seen == {"x": ("cuda:0", "gpu_now")}


def test_gpu_now_that_does_not_fit_falls_back_to_cpu_and_says_so():
    reports: list[StepReport] = []
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=AllGpuScheduler(), testbed=bed(), on_step=reports.append
    )
    result = react_graph(node, SCRIPT).invoke({"messages": [HumanMessage("go")]})
    assert len(tool_messages(result)) == 3
    record = reports[0].record
    assert record is not None
    by_id = record.by_id()
    assert (by_id["c2"].device, by_id["c2"].fallback) == ("cpu", "oom")
    assert by_id["c2"].end_ms == 320.0


def test_unknown_tool_still_gets_exactly_one_answer():
    node = DeviceToolNode(TOOLS, hints=HINTS, testbed=bed())
    script = [AIMessage("", tool_calls=[*calls("asr"), *calls("nope", prefix="x")]), AIMessage("x")]
    msgs = tool_messages(react_graph(node, script).invoke({"messages": [HumanMessage("go")]}))
    assert [m.tool_call_id for m in msgs] == ["c1", "x1"]
    assert msgs[1].status == "error" and "nope is not a valid tool" in str(msgs[1].content)


class Exploding(SchedulerBase):
    name = "exploding"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        raise RuntimeError("model server down")


class Garbage(SchedulerBase):
    name = "garbage"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return Decision(mapping={"c1": "tpu", "zzz": "cpu"}, reason="?")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("scheduler", "cause"), [(Exploding(), "scheduler_error"), (Garbage(), "invalid_decision")]
)
def test_scheduler_failures_fall_back_and_every_call_is_answered(scheduler: Any, cause: str):
    reports: list[StepReport] = []
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=scheduler, testbed=bed(), on_step=reports.append
    )
    msgs = tool_messages(react_graph(node, SCRIPT).invoke({"messages": [HumanMessage("go")]}))
    assert [m.tool_call_id for m in msgs] == ["c1", "c2", "c3"]
    assert all(m.status != "error" for m in msgs)
    report = reports[0]
    assert report.fallbacks == {"c1": cause, "c2": cause, "c3": cause}
    assert set(report.decision.mapping) == {"c1", "c2", "c3"}
    assert report.decision.fallback == cause


def test_pinned_and_cpu_only_hints_are_enforced_over_the_scheduler():
    hints = {**HINTS, "ocr": {"pinned": "cpu"}, "embed": {"gpu_capable": False}}
    reports: list[StepReport] = []
    node = DeviceToolNode(
        TOOLS, hints=hints, scheduler=AllGpuScheduler(), testbed=bed(), on_step=reports.append
    )
    react_graph(node, SCRIPT).invoke({"messages": [HumanMessage("go")]})
    assert dict(reports[0].decision.mapping) == {"c1": "gpu_now", "c2": "cpu", "c3": "cpu"}


def test_tool_exception_is_one_error_message_and_the_step_is_still_recorded():
    @device_hints(vram_mb=100)
    @tool
    def broken(text: str) -> str:
        """Always fails."""
        raise ValueError("bad input")

    reports: list[StepReport] = []
    node = DeviceToolNode(
        [broken],
        handle_tool_errors=True,
        testbed=SimulatedTestbed({"broken": PARAMS["asr"]}, vram_budget_mb=1000),
        on_step=reports.append,
    )
    script = [AIMessage("", tool_calls=calls("broken", "broken")), AIMessage("x")]
    msgs = tool_messages(react_graph(node, script).invoke({"messages": [HumanMessage("go")]}))
    assert [(m.tool_call_id, m.status) for m in msgs] == [("c1", "error"), ("c2", "error")]
    assert "bad input" in str(msgs[0].content)
    assert reports[0].record is not None and len(reports[0].record.calls) == 2


def test_separate_cpu_and_gpu_implementations():
    def on_cpu(text: str) -> str:
        """CPU variant."""
        return "cpu-impl"

    def on_gpu(text: str) -> str:
        """GPU variant."""
        return "gpu-impl"

    hints = {
        "asr": {**HINTS["asr"], "cpu_impl": on_cpu, "gpu_impl": on_gpu},
        "ocr": {**HINTS["ocr"], "cpu_impl": on_cpu},
        "embed": HINTS["embed"],
    }
    node = DeviceToolNode(
        TOOLS,
        hints=hints,
        scheduler=Recording({"asr": "gpu_now", "ocr": "cpu", "embed": "cpu"}),
        testbed=bed(),
    )
    msgs = tool_messages(react_graph(node, SCRIPT).invoke({"messages": [HumanMessage("go")]}))
    assert [m.content for m in msgs] == ["gpu-impl", "cpu-impl", "embed:input 3"]


def test_the_scheduler_is_not_asked_when_there_is_nothing_to_decide():
    scheduler = Recording({"asr": "gpu_now", "ocr": "gpu_now", "embed": "gpu_now"})
    reports: list[StepReport] = []
    pinned = {"asr": {"pinned": "gpu_queued"}, "ocr": {"pinned": "cpu"}, "embed": {"pinned": "cpu"}}
    node = DeviceToolNode(
        TOOLS, hints=pinned, scheduler=scheduler, testbed=bed(), on_step=reports.append
    )
    react_graph(node, SCRIPT).invoke({"messages": [HumanMessage("go")]})
    assert scheduler.batches == []  # one allowed option per call: the node decides alone
    assert dict(reports[0].decision.mapping) == {"c1": "gpu_queued", "c2": "cpu", "c3": "cpu"}
    assert reports[0].decision.reason == "forced: one allowed option per call"
    assert len(scheduler.observed) == 1  # it still learns from what ran


def test_default_scheduler_is_the_monitor_policy():
    assert DeviceToolNode(TOOLS).scheduler.name == "monitor"


def test_two_conversations_reusing_call_ids_at_once_get_their_own_steps():
    import threading

    started = threading.Barrier(2, timeout=10)

    @device_hints(vram_mb=100)
    @tool
    def wait_for_peer(text: str) -> str:
        """Returns once the other conversation's call is running too."""
        started.wait()
        return text

    reports: list[StepReport] = []
    params = {"wait_for_peer": PARAMS["embed"]}
    node = DeviceToolNode(
        [wait_for_peer],
        testbed=SimulatedTestbed(params, vram_budget_mb=4000),
        scheduler=Recording({"wait_for_peer": "cpu"}),
        on_step=reports.append,
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    results: dict[str, Any] = {}

    def converse(thread: str) -> None:
        call = {"name": "wait_for_peer", "args": {"text": thread}, "id": "call-1"}
        cfg = {"configurable": {"thread_id": thread}}
        results[thread] = graph.invoke({"messages": [AIMessage("", tool_calls=[call])]}, cfg)

    workers = [threading.Thread(target=converse, args=(t,)) for t in ("alice", "bob")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(20)
    assert {t: r["messages"][-1].content for t, r in results.items()} == {
        "alice": "alice",
        "bob": "bob",
    }
    assert len(reports) == 2  # one step per conversation, each closed with its own record
    assert all(r.record is not None and len(r.record.calls) == 1 for r in reports)
    assert node.planner.open_steps == 0
