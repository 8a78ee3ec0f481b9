"""The one-line switch: an existing ReAct-style graph, its `ToolNode` swapped for `DeviceToolNode`.

The graph below is ordinary LangGraph code. Scheduling its tools on devices is this diff:

.. code-block:: diff

    -from langgraph.prebuilt import ToolNode
    +from langgraph_devsched import DeviceToolNode
    ...
    -    builder.add_node("tools", ToolNode(TOOLS))
    +    builder.add_node("tools", DeviceToolNode(TOOLS, hints=HINTS, testbed=TESTBED))

``hints=`` says what each tool may use; ``testbed=`` runs the calls on the simulated testbed
so that this script needs no GPU (leave it out to run on this machine's GPU and CPU). The chat
model is scripted, so no API key is needed either.

Run: ``python examples/react_one_line_switch.py``
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import DeviceToolNode, SimulatedTestbed, StepReport, ToolParams


@tool
def transcribe(clip: str) -> str:
    """Speech-to-text for a recorded clip."""
    return f"transcript of {clip}"


@tool
def embed(text: str) -> str:
    """Embed a short text."""
    return f"vector of {text!r}"


TOOLS = [transcribe, embed]
HINTS = {
    "transcribe": {"vram_mb": 1800, "profile": {"cpu_ms": 900, "gpu_ms": 85}},
    "embed": {"vram_mb": 400, "profile": {"cpu_ms": 40, "gpu_ms": 55}},
}
TESTBED = SimulatedTestbed(
    {
        "transcribe": ToolParams(cpu_ms=900, gpu_ms=80, transfer_ms=5, vram_mb=1800),
        "embed": ToolParams(cpu_ms=40, gpu_ms=10, transfer_ms=45, vram_mb=400, gpu_share=0.3),
    },
    vram_budget_mb=8000,
)


class ScriptedModel(FakeMessagesListChatModel):
    """Stands in for a real chat model: answers the scripted messages in order."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


MODEL = ScriptedModel(
    responses=[
        AIMessage(
            "",
            tool_calls=[
                {"name": "transcribe", "args": {"clip": "meeting.wav"}, "id": "call-1"},
                {"name": "embed", "args": {"text": "quarterly plan"}, "id": "call-2"},
            ],
        ),
        AIMessage("The meeting was about the quarterly plan."),
    ]
)


def build_graph(on_step: Any = None) -> Any:
    """The app's ReAct graph; only the tools node differs from the ToolNode version."""
    model = MODEL.bind_tools(TOOLS)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", DeviceToolNode(TOOLS, hints=HINTS, testbed=TESTBED, on_step=on_step))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile()


def show(report: StepReport) -> None:
    assert report.record is not None
    for call in report.record.calls:
        print(
            f"{call.call_id} {call.tool}: {call.option} on {call.device}, "
            f"{call.latency_ms:.0f} ms (simulated)"
        )


def main() -> None:
    result = build_graph(on_step=show).invoke({"messages": [HumanMessage("Summarise it")]})
    print("answer:", result["messages"][-1].content)


if __name__ == "__main__":
    main()
