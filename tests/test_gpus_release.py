"""Nothing lost on several GPUs: a reservation goes back to the ledger that granted it (its
GPU's), on every exit path, a cancelled async step included; a ledger refuses one it never
granted instead of going out of balance (docs/multi_gpu.md, "Stress on several GPUs")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend
from langgraph_devsched.ledger import ForeignReservationError, VramLedger

VRAM = {"w0": 500.0, "w1": 1500.0, "w2": 2500.0, "w3": 1000.0}


def test_a_ledger_refuses_a_reservation_it_never_granted() -> None:
    gpu0, gpu1 = VramLedger(8000), VramLedger(4000)
    res = gpu1.try_reserve(1500)
    assert res is not None
    with pytest.raises(ForeignReservationError):
        gpu0.release(res)
    assert (gpu0.in_use_mb, gpu0.active) == (0.0, 0)  # not -1,500 MB and -1 call
    assert (gpu1.in_use_mb, gpu1.active, res.released) == (1500.0, 1, False)
    res.release()  # to the ledger that granted it, once
    res.release()
    assert (gpu1.in_use_mb, gpu1.active) == (0.0, 0)


def _graph(started: asyncio.Event, count: list[int]) -> tuple[Any, LocalBackend]:
    def tool(name: str) -> StructuredTool:
        async def arun(x: int) -> str:
            count[0] += 1
            if count[0] == len(VRAM):
                started.set()
            await asyncio.Event().wait()  # until the step is cancelled
            return name

        def run(x: int) -> str:
            return name

        return StructuredTool.from_function(func=run, coroutine=arun, name=name,
                                            description=f"holds {name}'s GPU until cancelled")

    backend = LocalBackend(gpu=[GpuConfig(8000, "cuda:0"), GpuConfig(4000, "cuda:1"),
                                GpuConfig(8000, "cuda:2"), GpuConfig(4000, "cuda:3")])
    hints = {name: {"vram_mb": mb, "gpus": [int(name[1])], "cpu_allowed": False}
             for name, mb in VRAM.items()}
    node = DeviceToolNode([tool(n) for n in VRAM], hints=hints, scheduler="all_gpu",
                          backend=backend)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    return graph, backend


async def _cleaned_up(backend: LocalBackend) -> list[tuple[float, int]]:
    """The ledgers once the cancelled calls ran their cleanup (the graph run may raise
    CancelledError before the last of them had its turn; 10 s at most: a hang, not speed)."""
    for _ in range(10_000):
        if all(ledger.active == 0 for ledger in backend.ledgers):
            break
        await asyncio.sleep(0.001)
    return [(ledger.in_use_mb, ledger.active) for ledger in backend.ledgers]


def _step() -> dict[str, Any]:
    calls = [{"name": n, "args": {"x": 1}, "id": f"c{n}", "type": "tool_call"} for n in VRAM]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def test_a_cancelled_async_step_gives_each_gpu_its_own_reservations_back() -> None:
    async def scenario() -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
        started, count = asyncio.Event(), [0]
        graph, backend = _graph(started, count)
        task = asyncio.ensure_future(graph.ainvoke(_step()))
        await asyncio.wait_for(started.wait(), 10)
        holding = [(ledger.in_use_mb, ledger.active) for ledger in backend.ledgers]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return holding, await _cleaned_up(backend)

    holding, after = asyncio.run(scenario())
    assert holding == [(500.0, 1), (1500.0, 1), (2500.0, 1), (1000.0, 1)]
    assert after == [(0.0, 0)] * 4


def test_the_retried_step_answers_every_call_once_and_every_ledger_ends_at_zero() -> None:
    async def scenario() -> tuple[list[str], list[tuple[float, int]]]:
        started, count = asyncio.Event(), [0]
        graph, backend = _graph(started, count)
        task = asyncio.ensure_future(graph.ainvoke(_step()))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _cleaned_up(backend) == [(0.0, 0)] * 4
        out = await asyncio.to_thread(graph.invoke, _step())  # sync: the tools answer at once
        answers = sorted(m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage))
        return answers, [(ledger.in_use_mb, ledger.active) for ledger in backend.ledgers]

    answers, after = asyncio.run(scenario())
    assert answers == sorted(f"c{n}" for n in VRAM)
    assert after == [(0.0, 0)] * 4
