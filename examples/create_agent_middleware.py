"""Device scheduling in a ``create_agent`` agent, through `DeviceSchedulingMiddleware`.

``create_agent`` runs each tool call of a model step as its own task; the middleware plans the
whole step once (one scheduler decision for all its calls) and runs every call under its
share of that plan. The tools run on the simulated testbed and the chat model is scripted, so
this needs neither a GPU nor an API key. Needs the ``agents`` extra (``langchain``).

Run: ``python examples/create_agent_middleware.py``
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from langgraph_devsched import InjectedDevice, SimulatedTestbed, StepReport, ToolParams
from langgraph_devsched.middleware import DeviceSchedulingMiddleware


@tool
def transcribe(clip: str, device: Annotated[str, InjectedDevice]) -> str:
    """Speech-to-text. ``device`` is filled by the scheduler, hidden from the model."""
    return f"transcript of {clip} (ran on {device})"


@tool
def read_text(image: str, device: Annotated[str, InjectedDevice]) -> str:
    """OCR."""
    return f"text of {image} (ran on {device})"


@tool
def embed(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Embed a text."""
    return f"vector of {text!r} (ran on {device})"


HINTS = {
    "transcribe": {"vram_mb": 1800, "profile": {"cpu_ms": 900, "gpu_ms": 85}},
    "read_text": {"vram_mb": 2500, "profile": {"cpu_ms": 300, "gpu_ms": 40}},
    "embed": {"vram_mb": 400, "profile": {"cpu_ms": 40, "gpu_ms": 55}},
}
TESTBED = SimulatedTestbed(
    {
        "transcribe": ToolParams(cpu_ms=900, gpu_ms=80, transfer_ms=5, vram_mb=1800),
        "read_text": ToolParams(cpu_ms=300, gpu_ms=40, vram_mb=2500, gpu_share=0.8),
        "embed": ToolParams(cpu_ms=40, gpu_ms=10, transfer_ms=45, vram_mb=400),
    },
    vram_budget_mb=8000,
)


class ScriptedModel(FakeMessagesListChatModel):
    """Stands in for a real chat model: answers the scripted messages in order."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def show(report: StepReport) -> None:
    print(f"one decision by {report.scheduler!r} for calls {', '.join(report.batch.call_ids)}")
    assert report.record is not None
    for call in report.record.calls:
        where = f"{call.option} on {call.device}"
        print(f"  {call.call_id} {call.tool}: {where}, {call.latency_ms:.0f} ms")
    print(f"  step makespan {report.record.makespan_ms:.0f} ms (simulated)")


def main() -> None:
    model = ScriptedModel(
        responses=[
            AIMessage(
                "",
                tool_calls=[
                    {"name": "transcribe", "args": {"clip": "a.wav"}, "id": "c1"},
                    {"name": "read_text", "args": {"image": "scan.png"}, "id": "c2"},
                    {"name": "embed", "args": {"text": "hello"}, "id": "c3"},
                ],
            ),
            AIMessage("All three are done."),
        ]
    )
    middleware = DeviceSchedulingMiddleware(
        scheduler="heft", hints=HINTS, testbed=TESTBED, on_step=show
    )
    agent = create_agent(model, [transcribe, read_text, embed], middleware=[middleware])
    result = agent.invoke({"messages": [("user", "Process my files")]})
    for message in result["messages"]:
        if message.type == "tool":
            print(f"{message.name}: {message.content}")
    print("answer:", result["messages"][-1].content)


if __name__ == "__main__":
    main()
