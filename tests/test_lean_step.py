"""A step of plain calls runs lean (`lean_step`) and reads exactly like the general path's:
one record per call on the CPU, the error of a raised call, the backend's model cache, the
same report; a call that asks anything of the backend takes the general path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode
from langgraph_devsched._node.lean_step import LeanExecution
from langgraph_devsched._node.planning import StepPlanner
from langgraph_devsched.executors.local import LocalBackend
from langgraph_devsched.models import ResidentModel

LOADS: list[str] = []
MODEL: ResidentModel[str] = ResidentModel("m", lambda device: LOADS.append(device) or device)


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool
def boom(text: str) -> str:
    """Fail."""
    raise ValueError(f"bad {text}")


@tool
def uses_model(text: str) -> str:
    """Ask the resident model for its instance."""
    return MODEL.get()


def graph_of(node: DeviceToolNode) -> Any:
    return (StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools")
            .compile())


def step(*names: str, i: int = 0) -> dict[str, Any]:
    calls = [{"name": n, "args": {"text": "x"}, "id": f"{n}-{i}"} for n in names]
    return {"messages": [AIMessage("", tool_calls=calls)]}


@pytest.fixture
def lean_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many steps were planned lean."""
    seen: list[int] = []
    real = StepPlanner.plan_lean

    def counted(self: StepPlanner, batch: Any) -> Any:
        planned = real(self, batch)
        if planned is not None:
            assert isinstance(planned.execution, LeanExecution)
            seen.append(len(batch.calls))
        return planned

    monkeypatch.setattr(StepPlanner, "plan_lean", counted)
    return seen


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_plain_calls_run_lean_with_one_record_each(run: str, lean_steps: list[int]) -> None:
    node = DeviceToolNode([echo, boom], handle_tool_errors=True)
    graph = graph_of(node)
    state = step("echo", "boom")
    out = graph.invoke(state) if run == "invoke" else asyncio.run(graph.ainvoke(state))
    assert out["messages"][1].content == "x"
    assert "bad x" in out["messages"][2].content
    assert lean_steps == [2]
    report = node.history[-1]
    assert report.decision.reason == "forced: one allowed option per call"
    assert report.record is not None
    calls = report.record.by_id()
    assert set(calls) == {"echo-0", "boom-0"}
    for c in calls.values():
        assert (c.option, c.device, c.fallback, c.vram_reserved_mb, c.gpu_peers) == (
            "cpu", "cpu", None, 0.0, 0)
        assert 0.0 <= c.start_ms <= c.end_ms <= report.record.makespan_ms
    assert calls["echo-0"].error is None
    # ToolNode answers the error itself (handle_tool_errors): the call returned normally
    assert calls["boom-0"].error is None


def test_a_raised_call_is_recorded_with_its_error(lean_steps: list[int]) -> None:
    node = DeviceToolNode([boom], handle_tool_errors=False)
    with pytest.raises(ValueError, match="bad x"):
        graph_of(node).invoke(step("boom"))
    assert lean_steps == [1]
    record = node.history[-1].record
    assert record is not None and record.calls[0].error is not None
    assert "bad x" in record.calls[0].error


def test_a_plain_tool_reads_resident_models_from_the_backend_cache(
    lean_steps: list[int],
) -> None:
    LOADS.clear()
    backend = LocalBackend(gpu=False)
    node = DeviceToolNode([uses_model], backend=backend)
    graph = graph_of(node)
    for i in range(3):
        assert graph.invoke(step("uses_model", i=i))["messages"][-1].content == "cpu"
    assert lean_steps == [1, 1, 1]
    assert LOADS == ["cpu"]  # loaded once, into the backend's cache
    assert backend.models.holds("m", "cpu")
    records = [report.record.calls[0] for report in node.history if report.record]
    assert [(c.model, c.loaded) for c in records] == [("m", True), (None, False), (None, False)]
    assert records[0].load_ms >= 0.0 and records[1].load_ms == 0.0  # the load: the first's


@pytest.mark.parametrize("why", ["hints", "call_timeout_s", "cpu_workers", "testbed"])
def test_a_call_that_asks_anything_of_the_backend_takes_the_general_path(
    why: str, lean_steps: list[int]
) -> None:
    from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

    kwargs: dict[str, Any] = {
        "hints": {"hints": {"echo": {"vram_mb": 10}}},
        "call_timeout_s": {"call_timeout_s": 30.0},
        "cpu_workers": {"backend": LocalBackend(gpu=False, cpu_workers=2)},
        "testbed": {"testbed": SimulatedTestbed({"echo": ToolParams(cpu_ms=1, gpu_ms=1)},
                                                vram_budget_mb=1000)},
    }[why]
    node = DeviceToolNode([echo], **kwargs)
    assert graph_of(node).invoke(step("echo"))["messages"][-1].content == "x"
    assert lean_steps == []
    assert node.history[-1].record is not None


def test_tools_only_ever_forced_cost_the_change_detector_nothing() -> None:
    """The monitor keeps latency evidence only of tools a decision of its read: plain
    steps leave its change detector empty; once a decided batch names the tool, its samples
    count, forced steps' included."""
    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.records import CallRecord, StepRecord
    from langgraph_devsched.schedulers import Batch, SchedulerView
    from langgraph_devsched.telemetry import DeviceState

    node = DeviceToolNode([echo])
    graph = graph_of(node)
    for i in range(5):
        graph.invoke(step("echo", "echo", i=i))
    assert len(node.history) == 5
    policy: Any = node.scheduler
    assert policy.state_sizes()["change_keys"] == 0

    def record(ms: float) -> StepRecord:
        return StepRecord((CallRecord("c", "echo", "cpu", "cpu", None, 0.0, ms, 0.0, 0),), ms)

    batch = Batch.of([("c", "echo", ToolDeviceSpec())])
    decision = policy.decide(batch, SchedulerView(DeviceState.cpu_only("test")))
    policy.observe(batch, decision, record(10.0))
    graph.invoke(step("echo", i=9))  # a forced step of a watched tool counts too
    assert policy.state_sizes()["change_keys"] == 1
    assert policy._changes.samples(["echo"]) == 2
