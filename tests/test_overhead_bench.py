"""Overhead of the node: `ToolNode` vs `DeviceToolNode` (static policy), no-op tools, 3 calls.

Run the comparison with ``pytest tests/test_overhead_bench.py --benchmark-enable``; CI runs
each once (benchmarks disabled) so the code path stays tested.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_devsched import DeviceToolNode


@tool
def noop_a(text: str) -> str:
    """Do nothing."""
    return text


@tool
def noop_b(text: str) -> str:
    """Do nothing."""
    return text


@tool
def noop_c(text: str) -> str:
    """Do nothing."""
    return text


TOOLS = [noop_a, noop_b, noop_c]
HINTS = {n: {"vram_mb": 100, "preferred": "gpu_queued"} for n in ("noop_a", "noop_b", "noop_c")}
STEP = {
    "messages": [
        AIMessage(
            "",
            tool_calls=[
                {"name": n, "args": {"text": "x"}, "id": f"{n}-{i}"}
                for i, n in enumerate(("noop_a", "noop_b", "noop_c"))
            ],
        )
    ]
}


def graph(node: Any) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


@pytest.mark.benchmark(group="node-overhead")
def test_plain_tool_node(benchmark: Any) -> None:
    g = graph(ToolNode(TOOLS))
    result = benchmark(g.invoke, STEP)
    assert len(result["messages"]) == 4


@pytest.mark.benchmark(group="node-overhead")
def test_device_tool_node_static(benchmark: Any) -> None:
    g = graph(DeviceToolNode(TOOLS, hints=HINTS, scheduler="static"))
    result = benchmark(g.invoke, STEP)
    assert [m.content for m in result["messages"][1:]] == ["x", "x", "x"]
