"""DeviceSchedulingMiddleware in create_agent: one joint plan per model step, placements,
fallbacks, device injection and decision metadata, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs

from langgraph_devsched import (
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    SimulatedTestbed,
    StepReport,
    current_placement,
    device_hints,
)
from langgraph_devsched.hints import HintsError
from langgraph_devsched.middleware import DeviceSchedulingMiddleware
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.tracing import decision_runs
from tests.fakes import HINTS, PARAMS, TOOLS, calls


class ToolCallingModel(FakeMessagesListChatModel):
    """Scripted replies; accepts `bind_tools` as create_agent requires."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingModel:
        return self


class Recording(SchedulerBase):
    name = "recording"

    def __init__(self, by_tool: dict[str, Any]) -> None:
        self.by_tool = by_tool
        self.batches: list[Batch] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.batches.append(batch)
        return self._decision({c.call_id: self.by_tool[c.tool] for c in batch.calls}, "fixed")


MAPPING = {"asr": "gpu_now", "ocr": "cpu", "embed": "gpu_queued"}


def agent(middleware: DeviceSchedulingMiddleware, script: list[AIMessage], tools: Any = TOOLS):
    return create_agent(ToolCallingModel(responses=script), tools, middleware=[middleware])


def invoke(graph: Any, mode: str) -> dict[str, Any]:
    inputs = {"messages": [HumanMessage("go")]}
    return graph.invoke(inputs) if mode == "sync" else asyncio.run(graph.ainvoke(inputs))


def bed(vram: float = 4000) -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=vram, cpu_cores=4)


def answers(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.tool_call_id, m.content) for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parallel_tool_calls_get_one_joint_plan(mode: str) -> None:
    scheduler = Recording(MAPPING)
    reports: list[StepReport] = []
    mw = DeviceSchedulingMiddleware(
        scheduler=scheduler, hints=HINTS, testbed=bed(), on_step=reports.append
    )
    script = [
        AIMessage("", tool_calls=calls("asr", "ocr", "embed")),
        AIMessage("", tool_calls=calls("embed", prefix="d")),
        AIMessage("done"),
    ]
    with collect_runs() as cb:
        result = invoke(agent(mw, script), mode)
    assert answers(result) == [
        ("c1", "asr:input 1"),
        ("c2", "ocr:input 2"),
        ("c3", "embed:input 3"),
        ("d1", "embed:input 1"),
    ]
    assert result["messages"][-1].content == "done"
    # create_agent sent each call as its own task; the scheduler was asked once per step
    assert [b.call_ids for b in scheduler.batches] == [("c1", "c2", "c3"), ("d1",)]
    first = reports[0].record
    assert first is not None
    placed = {c.call_id: (c.device, c.fallback, c.end_ms) for c in first.calls}
    assert placed == {
        "c1": ("cuda:0", None, 70.0),
        "c2": ("cpu", None, 300.0),
        "c3": ("cuda:0", None, 40.0),
    }
    assert list(mw.history) == reports
    runs = {r.extra["metadata"]["devsched.option"]: r for r in decision_runs(cb.traced_runs)[:3]}
    assert sorted(runs) == ["cpu", "gpu_now", "gpu_queued"]
    assert runs["gpu_now"].extra["metadata"]["devsched.observed_ms"] == 70.0
    assert "devsched:gpu_now" in runs["gpu_now"].tags


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tools_learn_their_device_through_the_middleware(mode: str) -> None:
    seen: dict[str, Any] = {}

    @device_hints(vram_mb=100)
    @tool
    def aware(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """A device-aware tool."""
        placement = current_placement()
        seen[text] = (device, placement.option if placement else None)
        return device

    mw = DeviceSchedulingMiddleware(
        scheduler=Recording({"aware": "gpu_now"}),
        testbed=SimulatedTestbed({"aware": PARAMS["asr"]}, vram_budget_mb=4000),
    )
    forged = [{"name": "aware", "args": {"text": "x", "device": "cuda:7"}, "id": "1"}]
    result = invoke(agent(mw, [AIMessage("", tool_calls=forged), AIMessage("ok")], [aware]), mode)
    assert answers(result) == [("1", "cuda:0")]
    assert seen == {"x": ("cuda:0", "gpu_now")}


class FakeCudaOOM(RuntimeError):
    """Looks like ``torch.cuda.OutOfMemoryError`` to the executor."""


FakeCudaOOM.__name__ = "OutOfMemoryError"
FakeCudaOOM.__module__ = "torch.cuda"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_gpu_oom_in_the_tool_reruns_it_on_the_cpu(mode: str) -> None:
    @device_hints(vram_mb=100)
    @tool
    def greedy(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Runs out of GPU memory on the GPU."""
        if device != "cpu":
            raise FakeCudaOOM("CUDA out of memory")
        return f"{text} on {device}"

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000, device="cuda:0"))
    mw = DeviceSchedulingMiddleware(
        scheduler=Recording({"greedy": "gpu_now"}), backend=backend, on_step=reports.append
    )
    script = [AIMessage("", tool_calls=[{"name": "greedy", "args": {"text": "t"}, "id": "g"}])]
    with collect_runs() as cb:
        result = invoke(agent(mw, [*script, AIMessage("ok")], [greedy]), mode)
    assert answers(result) == [("g", "t on cpu")]
    record = reports[0].record
    assert record is not None
    (call,) = record.calls
    assert (call.option, call.device, call.fallback) == ("gpu_now", "cpu", "oom")
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0.0
    retried = decision_runs(cb.traced_runs)[-1].extra["metadata"]
    assert (retried["devsched.device"], retried["devsched.fallback"]) == ("cpu", "oom")


def test_hints_are_validated_when_built_and_checked_against_the_agents_tools() -> None:
    with pytest.raises(HintsError, match="pinned"):
        DeviceSchedulingMiddleware(hints={"asr": {"pinned": "tpu"}})
    with pytest.raises(ValueError, match="either backend= or testbed="):
        DeviceSchedulingMiddleware(backend=LocalBackend(gpu=False), testbed=bed())
    mw = DeviceSchedulingMiddleware(hints={"nope": {"vram_mb": 1}}, testbed=bed())
    with pytest.raises(HintsError, match=r"unknown tool.*'nope'.*known tools: asr, embed, ocr"):
        invoke(agent(mw, [AIMessage("", tool_calls=calls("asr")), AIMessage("x")]), "sync")


def test_tools_without_hints_run_as_they_are() -> None:
    mw = DeviceSchedulingMiddleware(testbed=bed())
    result = invoke(agent(mw, [AIMessage("", tool_calls=calls("asr")), AIMessage("x")]), "sync")
    assert answers(result) == [("c1", "asr:input 1")]
    assert dict(mw.history[0].decision.mapping) == {"c1": "cpu"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_scheduler_runs_nest_under_the_agents_tools_step(mode: str) -> None:
    from langchain_core.runnables import RunnableConfig, RunnableLambda
    from langchain_core.tracers.langchain import LangChainTracer

    from tests.test_tracing import FakeLangSmith, parent_chain

    class Consulting(SchedulerBase):
        name = "consulting"

        def decide(
            self, batch: Batch, view: SchedulerView, *, config: RunnableConfig | None = None
        ) -> Decision:
            RunnableLambda(lambda x: x, name="scheduler_subagent").invoke(batch.call_ids, config)
            return self._decision({c.call_id: "cpu" for c in batch.calls}, "asked")

    client = FakeLangSmith()
    tracer = LangChainTracer(client=client, project_name="devsched-test")  # type: ignore[arg-type]
    mw = DeviceSchedulingMiddleware(scheduler=Consulting(), hints=HINTS, testbed=bed())
    graph = agent(mw, [AIMessage("", tool_calls=calls("asr", "ocr")), AIMessage("done")])
    inputs = {"messages": [HumanMessage("go")]}
    config: RunnableConfig = {"callbacks": [tracer]}
    if mode == "sync":
        graph.invoke(inputs, config)
    else:
        asyncio.run(graph.ainvoke(inputs, config))
    tracer.wait_for_futures()
    runs = {c["id"]: c for c in client.created}
    (sub,) = [c for c in client.created if c["name"] == "scheduler_subagent"]
    chain = parent_chain(runs, sub["id"])
    wrap = "DeviceSchedulingMiddleware." + (
        "wrap_tool_call" if mode == "sync" else "awrap_tool_call"
    )
    assert chain[:4] == ["scheduler_subagent", "devsched.decide", wrap, "tools"], chain
    ends = {u["name"]: u for u in client.updated if u.get("run_type") == "tool"}
    assert ends["asr"]["extra"]["metadata"]["devsched.scheduler"] == "consulting"
