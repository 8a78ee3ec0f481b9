"""Overhead of the node against `ToolNode`: three no-op calls a step, unhinted and hinted.

Run the comparison with ``pytest tests/test_overhead_bench.py --benchmark-enable``; CI runs
each once (benchmarks disabled) so the code path stays tested. ``devsched perf`` measures the
same graphs as ratios in one run, A and B alternated (`langgraph_devsched._dev.perf.overhead`).
"""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_devsched import DeviceToolNode
from langgraph_devsched._dev.perf.overhead import (
    hinted_graph,
    noop_tools,
    one_node_graph,
    step_input,
    tool_node_graph,
    unhinted_graph,
)

STEP = step_input(0)
HINTS = {n: {"vram_mb": 100, "preferred": "gpu_queued"} for n in ("noop_a", "noop_b", "noop_c")}


def answers(result: dict[str, Any]) -> list[str]:
    return [m.content for m in result["messages"][1:]]


@pytest.mark.benchmark(group="node-overhead-unhinted")
def test_plain_tool_node(benchmark: Any) -> None:
    result = benchmark(tool_node_graph().invoke, STEP)
    assert answers(result) == ["x", "x", "x"]


@pytest.mark.benchmark(group="node-overhead-unhinted")
def test_device_tool_node_unhinted(benchmark: Any) -> None:
    result = benchmark(unhinted_graph().invoke, STEP)
    assert answers(result) == ["x", "x", "x"]


@pytest.mark.benchmark(group="node-overhead-hinted")
def test_plain_tool_node_beside_hinted(benchmark: Any) -> None:
    result = benchmark(tool_node_graph().invoke, STEP)
    assert answers(result) == ["x", "x", "x"]


@pytest.mark.benchmark(group="node-overhead-hinted")
def test_device_tool_node_hinted_settled(benchmark: Any) -> None:
    graph, node = hinted_graph()
    for i in range(1, 101):  # settle: the monitor learns, then reuses its decision
        graph.invoke(step_input(i))
    result = benchmark(graph.invoke, STEP)
    assert answers(result) == ["x", "x", "x"]
    assert node.history[-1].record is not None
    assert {c.device for c in node.history[-1].record.calls} <= {"cpu", "cuda:0"}


@pytest.mark.benchmark(group="node-overhead-static")
def test_device_tool_node_static(benchmark: Any) -> None:
    g = one_node_graph(DeviceToolNode(noop_tools(), hints=HINTS, scheduler="static"))
    result = benchmark(g.invoke, STEP)
    assert answers(result) == ["x", "x", "x"]
