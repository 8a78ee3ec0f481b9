"""The main job: an agent whose tools are AI workloads, scheduled by `DeviceToolNode`.

A compiled LangGraph ReAct-style graph with a scripted chat model (no API key needed) asks
for four AI tools in parallel, three times. The node decides `gpu_now`, `gpu_queued` or
`cpu` for every call of each step jointly, runs it on the simulated testbed (an 8 GB GPU
partly held by the agent's own LLM server, 8 CPU cores) and prints, per call, the option
chosen, the device, the simulated latency and the VRAM ledger.

Run: ``python examples/demo_app.py [--scheduler NAME]``
"""

from __future__ import annotations

import argparse
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import (
    DeviceToolNode,
    SimulatedTestbed,
    StepReport,
    ToolParams,
    current_device,
)
from langgraph_devsched._node.step_text import format_step_report
from langgraph_devsched.schedulers import scheduler_names
from langgraph_devsched.testbed import BackgroundLoad


@tool
def transcribe(audio_id: str) -> str:
    """Speech-to-text for a recorded clip."""
    return f"transcript of {audio_id} (on {current_device()})"


@tool
def read_text(image_id: str) -> str:
    """OCR: read the text in an image."""
    return f"text of {image_id} (on {current_device()})"


@tool
def embed(text: str) -> str:
    """Embed a short text for retrieval."""
    return f"384-d vector for {text!r} (on {current_device()})"


@tool
def caption(image_id: str) -> str:
    """Describe an image in one sentence."""
    return f"caption of {image_id} (on {current_device()})"


# Declared by the app: what each tool may use (the scheduler sees these, and solo profiles).
HINTS: dict[str, dict[str, Any]] = {
    "transcribe": {"vram_mb": 1800, "profile": {"cpu_ms": 900, "gpu_ms": 85, "transfer_ms": 5}},
    "read_text": {"vram_mb": 2600, "profile": {"cpu_ms": 420, "gpu_ms": 60, "transfer_ms": 8}},
    "embed": {"vram_mb": 600, "profile": {"cpu_ms": 35, "gpu_ms": 40, "transfer_ms": 30}},
    "caption": {"vram_mb": 3200, "profile": {"cpu_ms": 1400, "gpu_ms": 120, "transfer_ms": 10}},
}

# Hidden ground truth of the simulated machine (never shown to a scheduler).
TESTBED = SimulatedTestbed(
    {
        "transcribe": ToolParams(cpu_ms=900, gpu_ms=80, transfer_ms=5, vram_mb=1800, gpu_share=0.7),
        "read_text": ToolParams(cpu_ms=420, gpu_ms=52, transfer_ms=8, vram_mb=2600, gpu_share=0.6),
        "embed": ToolParams(cpu_ms=35, gpu_ms=10, transfer_ms=30, vram_mb=600, gpu_share=0.3),
        "caption": ToolParams(cpu_ms=1400, gpu_ms=110, transfer_ms=10, vram_mb=3200, gpu_share=0.8),
    },
    vram_budget_mb=8000,
    cpu_cores=8,
    background=BackgroundLoad(vram_mb=2000, gpu_share=0.3),
)


def scripted_model(rounds: int) -> GenericFakeChatModel:
    messages = []
    for r in range(rounds):
        calls = [
            {"name": "transcribe", "args": {"audio_id": f"clip-{r}"}, "id": f"r{r}-asr"},
            {"name": "read_text", "args": {"image_id": f"scan-{r}"}, "id": f"r{r}-ocr"},
            {"name": "embed", "args": {"text": f"query {r}"}, "id": f"r{r}-emb"},
            {"name": "caption", "args": {"image_id": f"photo-{r}"}, "id": f"r{r}-cap"},
        ]
        messages.append(AIMessage("", tool_calls=calls))
    messages.append(AIMessage("All inputs processed."))
    return GenericFakeChatModel(messages=iter(messages))


def build_graph(node: DeviceToolNode, rounds: int) -> Any:
    model = scripted_model(rounds)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)  # was: ToolNode([transcribe, read_text, embed, caption])
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile()


def print_step(report: StepReport, budget_mb: float) -> None:
    print()
    print(format_step_report(report, budget_mb=budget_mb))
    record = report.record
    ledger_end = record.extra.get("vram_end_mb", 0.0) if record is not None else 0.0
    print(f"  ledger at end {ledger_end:.0f} MB (background excluded)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default=None, help=f"one of {', '.join(scheduler_names())}")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(
        "Simulated testbed: an 8 GB GPU (2 GB held by the agent's LLM server) and 8 CPU cores;"
        "\ndevices and times below are simulated, the tools' answers are real."
    )
    budget = TESTBED.device_state().vram_budget_mb - TESTBED.device_state().vram_used_mb
    node = DeviceToolNode(
        [transcribe, read_text, embed, caption],
        hints=HINTS,
        scheduler=args.scheduler,
        testbed=TESTBED,
        on_step=lambda report: print_step(report, budget),
    )
    result = build_graph(node, args.rounds).invoke({"messages": [HumanMessage("process inbox")]})
    answered = sum(1 for m in result["messages"] if m.type == "tool")
    print(f"\n{answered} tool calls answered; simulated clock at {TESTBED.now_ms:.1f} ms")
    print(f"agent: {result['messages'][-1].content}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
