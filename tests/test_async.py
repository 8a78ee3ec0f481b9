"""Async paths never block the event loop: the calls of one step overlap under ``ainvoke``.

Overlap is proven with rendezvous points, not timings: each tool waits until every tool of
the step has started. Run one after another, the first would wait alone and fail after the
(generous) timeout, so these tests can fail but never wait when they pass.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, LocalBackend, SimulatedTestbed, ToolParams

TIMEOUT_S = 10.0
STEP = AIMessage(
    "",
    tool_calls=[
        {"name": "left", "args": {"text": "a"}, "id": "l"},
        {"name": "right", "args": {"text": "b"}, "id": "r"},
    ],
)
HINTS = {"left": {"vram_mb": 100}, "right": {"vram_mb": 100}}
PARAMS = {n: ToolParams(cpu_ms=100, gpu_ms=10, vram_mb=100) for n in ("left", "right")}


class AsyncRendezvous:
    """Each caller waits until ``n`` callers have arrived (asyncio)."""

    def __init__(self, n: int = 2) -> None:
        self.n, self.arrived = n, 0
        self.all_here = asyncio.Event()

    async def meet(self) -> None:
        self.arrived += 1
        if self.arrived == self.n:
            self.all_here.set()
        await asyncio.wait_for(self.all_here.wait(), TIMEOUT_S)


def async_tools(rendezvous: AsyncRendezvous) -> list[BaseTool]:
    @tool
    async def left(text: str) -> str:
        """Slow async tool."""
        await rendezvous.meet()
        return f"left:{text}"

    @tool
    async def right(text: str) -> str:
        """Slow async tool."""
        await rendezvous.meet()
        return f"right:{text}"

    return [left, right]


def sync_tools(barrier: threading.Barrier, loop: asyncio.AbstractEventLoop | None = None):
    """Two sync tools that meet at ``barrier``; given the ``loop``, each also proves the loop
    runs while it runs (a callback it schedules there must fire while it waits)."""

    def wait(text: str) -> None:
        barrier.wait()
        if loop is not None:
            fired = threading.Event()
            loop.call_soon_threadsafe(fired.set)
            if not fired.wait(TIMEOUT_S):
                raise TimeoutError("the event loop was blocked while the tool ran")

    @tool
    def left(text: str) -> str:
        """Slow sync tool."""
        wait(text)
        return f"left:{text}"

    @tool
    def right(text: str) -> str:
        """Slow sync tool."""
        wait(text)
        return f"right:{text}"

    return [left, right]


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def answers(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (m.tool_call_id, m.content, m.status)
        for m in result["messages"]
        if isinstance(m, ToolMessage)
    ]


EXPECTED = [("l", "left:a", "success"), ("r", "right:b", "success")]


def make_bed() -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=1000)


@pytest.mark.parametrize("backend", ["testbed", "local"])
async def test_two_slow_async_tools_overlap(backend: str) -> None:
    rendezvous = AsyncRendezvous()
    kw: dict[str, Any] = (
        {"testbed": make_bed()} if backend == "testbed" else {"backend": LocalBackend(gpu=False)}
    )
    node = DeviceToolNode(async_tools(rendezvous), hints=HINTS, **kw)
    result = await graph(node).ainvoke({"messages": [HumanMessage("go"), STEP]})
    assert answers(result) == EXPECTED


@pytest.mark.parametrize("backend", ["testbed", "local"])
async def test_two_slow_sync_tools_overlap_under_ainvoke(backend: str) -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    loop = asyncio.get_running_loop()
    kw: dict[str, Any] = (
        {"testbed": make_bed()} if backend == "testbed" else {"backend": LocalBackend(gpu=False)}
    )
    node = DeviceToolNode(sync_tools(barrier, loop), hints=HINTS, **kw)
    result = await graph(node).ainvoke({"messages": [HumanMessage("go"), STEP]})
    assert answers(result) == EXPECTED


async def test_a_sync_wrap_tool_call_does_not_serialise_the_step_under_ainvoke() -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    loop = asyncio.get_running_loop()
    wrapped: list[str] = []

    def wrapper(request: Any, execute: Any) -> Any:
        wrapped.append(request.tool_call["id"])
        return execute(request)

    node = DeviceToolNode(
        sync_tools(barrier, loop), hints=HINTS, testbed=make_bed(), wrap_tool_call=wrapper
    )
    result = await graph(node).ainvoke({"messages": [HumanMessage("go"), STEP]})
    assert answers(result) == EXPECTED
    assert sorted(wrapped) == ["l", "r"]


def test_a_sync_wrap_tool_call_still_runs_sync_under_invoke() -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    node = DeviceToolNode(
        sync_tools(barrier), hints=HINTS, testbed=make_bed(), wrap_tool_call=lambda r, ex: ex(r)
    )
    result = graph(node).invoke({"messages": [HumanMessage("go"), STEP]})
    assert answers(result) == EXPECTED


# -- the create_agent middleware ------------------------------------------------------------------


def agent(tools: Sequence[BaseTool]) -> Any:
    pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    from langgraph_devsched.middleware import DeviceSchedulingMiddleware

    class Model(FakeMessagesListChatModel):
        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Model:
            return self

    model = Model(responses=[STEP, AIMessage("done")])
    middleware = DeviceSchedulingMiddleware(hints=HINTS, testbed=make_bed())
    return create_agent(model, tools, middleware=[middleware])


async def test_middleware_async_tools_overlap() -> None:
    result = await agent(async_tools(AsyncRendezvous())).ainvoke({"messages": [("user", "go")]})
    assert answers(result) == EXPECTED


async def test_middleware_sync_tools_overlap_under_ainvoke() -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    g = agent(sync_tools(barrier, asyncio.get_running_loop()))
    result = await g.ainvoke({"messages": [("user", "go")]})
    assert answers(result) == EXPECTED


async def test_two_slow_sync_tools_overlap_under_astream() -> None:
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    node = DeviceToolNode(
        sync_tools(barrier, asyncio.get_running_loop()), hints=HINTS, testbed=make_bed()
    )
    chunks = [
        chunk
        async for chunk in graph(node).astream(
            {"messages": [HumanMessage("go"), STEP]}, stream_mode="values"
        )
    ]
    assert answers(chunks[-1]) == EXPECTED
