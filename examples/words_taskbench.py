"""One real request, read by the sub-agent before the agent's first tool step.

A TaskBench request (Shen et al. 2023, MIT; read from a directory, never copied here) is
replayed through `DeviceToolNode` on a simulated 12 GB GPU whose tools are the domain's 23
tools (the bench's profile table: one named open model each). The request is handed to the
node at the graph's entry (`DeviceToolNode.read_request`); the scheduler reads its words in
the background while the agent thinks; the agent then calls the request's true tools, level
by level. It prints what was read, what the policy loads in the agent's first turn with it
(on a real backend the node runs that load: `LocalBackend`), and each step.

With an OpenAI-compatible server configured (``DEVSCHED_LLM_BASE_URL``, ``DEVSCHED_LLM_MODEL``;
e.g. the llama.cpp server of ``scripts/qwen_gguf.sh``), the scheduler is ``agentic`` (its
sub-agent's model reads the request). Otherwise the monitor reads it without a model
(``forecast="lexical"``) and the example says how to switch.

Run: ``python examples/words_taskbench.py [TASKBENCH_DIR] [REQUEST_INDEX]`` (default
``../shared/taskbench``, request 0). See docs/words.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, SimulatedTestbed
from langgraph_devsched.bench.taskbench import load_taskbench
from langgraph_devsched.bench.taskbench_profiles import load_profiles
from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy

WAIT_S = 120.0


def _tool(name: str, description: str) -> StructuredTool:
    def run(text: str = "") -> str:
        return f"{name} done"

    return StructuredTool.from_function(run, name=name, description=description)


def _scheduler() -> Any:
    if os.environ.get("DEVSCHED_LLM_BASE_URL"):
        return "agentic"
    print("no model server configured (DEVSCHED_LLM_BASE_URL): the monitor reads the words "
          "without a model (forecast='lexical')")
    return DefaultPolicy(forecast="lexical")


def main(folder: str = "../shared/taskbench", index: int = 0) -> None:
    bench = load_taskbench(folder)
    request = bench.requests[index % len(bench.requests)]
    profiles = load_profiles()
    tools = [_tool(t.name, t.description) for t in bench.tools.values()]
    hints = {name: {"model": p.model, "weights_mb": p.weights_mb, "vram_mb": p.vram_mb,
                    "profile": {"cpu_ms": p.cpu_ms, "gpu_ms": p.gpu_ms + p.transfer_ms,
                                "transfer_ms": p.transfer_ms},
                    "load_ms": {"gpu_ms": p.load_gpu_ms, "cpu_ms": p.load_cpu_ms}}
             for name, p in profiles.tools.items() if name in bench.tools}
    node = DeviceToolNode(tools, hints=hints, scheduler=_scheduler(),
                          testbed=SimulatedTestbed(profiles.tools, vram_budget_mb=12000))
    steps = request.steps()
    script = [AIMessage("", tool_calls=[{"name": t, "args": {"text": "x"}, "id": f"s{k}c{j}"}
                                        for j, t in enumerate(step)])
              for k, step in enumerate(steps)] + [AIMessage("done")]

    def agent(state: MessagesState) -> dict[str, Any]:
        done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        return {"messages": [script[min(done, len(script) - 1)]]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    graph = builder.compile()

    print(f"request {request.id}: true tools {', '.join(request.tools)}")
    node.read_request(request.instruction)  # at the graph's entry, as the request arrives
    if node.words is not None:  # a demo waits to show it; an app never does
        node.words.join(WAIT_S)
        read = node.words.history[-1]
        print(f"read ({read.source}, {read.latency_ms:.0f} ms): predicted "
              f"{', '.join(read.predicted) or 'nothing'}")
    asked = node.scheduler.preloads(node.backend.device_state(), 4000.0)  # type: ignore
    print("to load in the agent's first turn (4 s): "
          f"{', '.join(p.model for p in asked) or 'nothing'}")
    graph.invoke({"messages": [HumanMessage(request.instruction)]})
    for k, report in enumerate(node.history):
        record = report.record
        for call in record.calls if record is not None else ():
            state = "loaded" if call.loaded else "warm" if call.on_gpu else "-"
            print(f"step {k + 1}: {call.tool} on {call.device} ({state}), "
                  f"{call.end_ms - call.start_ms:.0f} ms")


if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else str(
        Path(__file__).resolve().parents[1] / ".." / "shared" / "taskbench")
    main(folder, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
