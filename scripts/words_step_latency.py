"""No step waits for the words: a tool step's latency with a forecaster that answers after
5 s, against none, on the local backend.

Usage: ``python scripts/words_step_latency.py [STEPS]`` (default 200). Each run is a new
request (a new human message), so every step starts a reading; the two nodes alternate, one
step each, so the machine's drift falls on both. Prints each node's step latency p50 / p95
(the graph's invocation of the tools node alone) and the p50 difference.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, LocalBackend
from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy
from langgraph_devsched.words import ToolCard, WordsForecast

ANSWER_S = 5.0


class Slow:
    """Answers after `ANSWER_S` seconds (a model on a busy server)."""

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        time.sleep(ANSWER_S)
        return WordsForecast({t.name: 0.9 for t in tools}, source="slow",
                             latency_ms=ANSWER_S * 1000)


@tool
def embed(text: str) -> str:
    """Embed a text."""
    return f"embedded {len(text)}"


def graph(node: DeviceToolNode) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    return builder.compile()


def step_ms(graph: Any, node: DeviceToolNode, k: int) -> float:
    """One request and its one tool step; the node's own time for the step (its
    ``StepReport`` is written when the step closed)."""
    messages = [HumanMessage(f"request {k}: embed this"),
                AIMessage("", tool_calls=[{"name": "embed", "args": {"text": str(k)},
                                           "id": f"c{k}"}])]
    start = time.perf_counter()
    graph.invoke({"messages": messages})
    return (time.perf_counter() - start) * 1000


def main(steps: int) -> None:
    nodes = {"words off": DeviceToolNode([embed], scheduler=DefaultPolicy(),
                                         backend=LocalBackend(gpu=False)),
             "words on (answers after 5 s)": DeviceToolNode(
                 [embed], scheduler=DefaultPolicy(forecast=Slow()),
                 backend=LocalBackend(gpu=False))}
    graphs = {name: graph(node) for name, node in nodes.items()}
    times: dict[str, list[float]] = {name: [] for name in nodes}
    for k in range(steps):
        for name, node in nodes.items():
            times[name].append(step_ms(graphs[name], node, k))
    for name, ms in times.items():
        ms.sort()
        print(f"{name}: p50 {statistics.median(ms):.3f} ms, p95 "
              f"{ms[int(0.95 * (len(ms) - 1))]:.3f} ms over {len(ms)} steps")
    off, on = (statistics.median(v) for v in times.values())
    print(f"p50 difference (on - off): {on - off:+.3f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
