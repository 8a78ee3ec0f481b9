"""The node's overhead against `ToolNode`: three no-op calls a step, A and B alternated.

Two pairs, each measured in one process, step after step alternating A and B (B first
every other step), so that a drift in the machine's speed hits both sides alike:

* **unhinted** — ``ToolNode(tools)`` against ``DeviceToolNode(tools)``: no hints, so every
  call is forced to the CPU side and no scheduler is asked;
* **hinted** — ``ToolNode(tools)`` against ``DeviceToolNode(tools, hints=..., testbed=...)``
  with the default scheduler on a simulated GPU, timed after ``settle`` untimed steps (the
  monitor then reuses its decision; ``reused`` counts the timed steps it did).

Each pair gives both sides' median step time (ms), the ratio of the medians (B / A) and the
median of the per-step differences (ms a step). The graphs are the ones the benchmark pair
in ``tests/test_overhead_bench.py`` times with pytest-benchmark.

>>> from langgraph_devsched._dev.perf.overhead import measure_overhead
>>> doc = measure_overhead(steps=4, settle=2)
>>> sorted(doc["unhinted"]), doc["hinted"]["steps"]
(['device_ms', 'diff_ms', 'ratio', 'steps', 'tool_node_ms'], 4)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from langgraph_devsched._dev.graphs import one_node_graph

TOOL_NAMES = ("noop_a", "noop_b", "noop_c")
HINTED_VRAM_MB = 100.0


def noop_tools() -> list[Any]:
    """Three tools that return their input."""
    from langchain_core.tools import StructuredTool

    def noop(text: str) -> str:
        return text

    return [StructuredTool.from_function(noop, name=n, description="Do nothing.")
            for n in TOOL_NAMES]


def step_input(i: int) -> dict[str, Any]:
    """The graph input of step ``i``: one AI message calling each tool once."""
    from langchain_core.messages import AIMessage

    calls = [{"name": n, "args": {"text": "x"}, "id": f"{n}-{i}"} for n in TOOL_NAMES]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def tool_node_graph() -> Any:
    """A: upstream `ToolNode` over the no-op tools."""
    from langgraph.prebuilt import ToolNode

    return one_node_graph(ToolNode(noop_tools()))


def unhinted_graph() -> Any:
    """B, unhinted: `DeviceToolNode` over the same tools, as an app changes one line."""
    from langgraph_devsched.node import DeviceToolNode

    return one_node_graph(DeviceToolNode(noop_tools()))


def hinted_graph() -> tuple[Any, Any]:
    """B, hinted: the default scheduler on a simulated GPU (each tool 100 MB of VRAM, GPU
    preferred); the graph and its node (whose ``history`` says which decisions were
    reused)."""
    from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
    from langgraph_devsched.node import DeviceToolNode
    from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

    params = {n: ToolParams(cpu_ms=8.0, gpu_ms=1.0, transfer_ms=0.2, vram_mb=HINTED_VRAM_MB)
              for n in TOOL_NAMES}
    hints = {n: ToolDeviceSpec(vram_mb=p.vram_mb, profile=SoloProfile(
        cpu_ms=p.cpu_ms, gpu_ms=p.gpu_ms + p.transfer_ms, transfer_ms=p.transfer_ms))
        for n, p in params.items()}
    bed = SimulatedTestbed(params, vram_budget_mb=8000, cpu_cores=4)
    node = DeviceToolNode(noop_tools(), hints=hints, testbed=bed)
    return one_node_graph(node), node


def alternate(
    a: Any, b: Any, *, steps: int, start: int = 0, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Any]:
    """Invoke ``a`` and ``b`` on the same input, step by step (B first on odd steps)."""
    times_a: list[float] = []
    diffs: list[float] = []
    times_b: list[float] = []
    for i in range(start, start + steps):
        state = step_input(i)
        order = (b, a) if i % 2 else (a, b)
        spent = {}
        for graph in order:
            t0 = clock()
            graph.invoke(state)
            spent[id(graph)] = (clock() - t0) * 1000.0
        times_a.append(spent[id(a)])
        times_b.append(spent[id(b)])
        diffs.append(spent[id(b)] - spent[id(a)])
    med_a = statistics.median(times_a)
    med_b = statistics.median(times_b)
    return {
        "steps": steps,
        "tool_node_ms": round(med_a, 4),
        "device_ms": round(med_b, 4),
        "ratio": round(med_b / med_a, 4) if med_a > 0 else None,
        "diff_ms": round(statistics.median(diffs), 4),
    }


def measure_overhead(
    *, steps: int = 800, settle: int = 100, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Any]:
    """Both pairs (see the module docstring), each after ``settle`` untimed steps."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    tool_node = tool_node_graph()
    out: dict[str, Any] = {"calls_per_step": len(TOOL_NAMES), "settle": settle}
    unhinted = unhinted_graph()
    alternate(tool_node, unhinted, steps=settle, clock=clock)
    out["unhinted"] = alternate(tool_node, unhinted, steps=steps, start=settle, clock=clock)
    hinted, node = hinted_graph()
    alternate(tool_node, hinted, steps=settle, clock=clock)
    node.history.clear()
    out["hinted"] = alternate(tool_node, hinted, steps=steps, start=settle, clock=clock)
    out["hinted"]["reused"] = sum(bool(r.decision.reused) for r in node.history)
    out["hinted"]["of"] = len(node.history)
    return out
