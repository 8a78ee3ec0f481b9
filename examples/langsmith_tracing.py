"""Decision tracing: every tool run carries its device decision as LangSmith metadata.

Nothing to add to the app: with the usual LangSmith settings (``LANGSMITH_TRACING=true`` and
``LANGSMITH_API_KEY``) the tool runs appear in LangSmith with ``devsched.*`` metadata and a
``devsched:<option>`` tag to filter on. Without them, this script collects the same runs
offline with ``collect_runs`` and prints what LangSmith would show.

Run: ``python examples/langsmith_tracing.py``
"""

from __future__ import annotations

import os

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, SimulatedTestbed, ToolParams
from langgraph_devsched.tracing import decision_runs


@tool
def transcribe(clip: str) -> str:
    """Speech-to-text."""
    return f"transcript of {clip}"


@tool
def read_text(image: str) -> str:
    """OCR."""
    return f"text of {image}"


HINTS = {"transcribe": {"vram_mb": 1800}, "read_text": {"vram_mb": 2500}}
TESTBED = SimulatedTestbed(
    {
        "transcribe": ToolParams(cpu_ms=900, gpu_ms=80, transfer_ms=5, vram_mb=1800),
        "read_text": ToolParams(cpu_ms=300, gpu_ms=40, vram_mb=2500, gpu_share=0.8),
    },
    vram_budget_mb=4000,  # both do not fit at once: one waits or goes to the CPU
)


def main() -> None:
    node = DeviceToolNode(
        [transcribe, read_text], hints=HINTS, scheduler="all_gpu", testbed=TESTBED
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    step = AIMessage(
        "",
        tool_calls=[
            {"name": "transcribe", "args": {"clip": "a.wav"}, "id": "1"},
            {"name": "read_text", "args": {"image": "scan.png"}, "id": "2"},
        ],
    )
    if os.environ.get("LANGSMITH_TRACING", "").lower() == "true":
        print("LANGSMITH_TRACING is on: these runs are also sent to LangSmith")
    with collect_runs() as collected:
        graph.invoke({"messages": [step]}, {"run_name": "devsched-tracing-example"})
    for run in decision_runs(collected.traced_runs):
        print(f"tool run {run.name!r}  tags: {[t for t in run.tags if t.startswith('devsched:')]}")
        for key, value in run.extra["metadata"].items():
            if key.startswith("devsched."):
                print(f"    {key} = {value!r}")


if __name__ == "__main__":
    main()
