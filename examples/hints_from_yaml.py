"""Device hints from a YAML file: ``DeviceToolNode(tools, hints="examples/hints.yaml")``.

The file (``examples/hints.yaml``) declares, per tool, what it may run on and what it needs.
It is validated when the node is built: a wrong field or option fails at once with a message
that names the tool, the field and the valid values. The step runs on the simulated testbed.

Run: ``python examples/hints_from_yaml.py``
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, SimulatedTestbed, ToolParams, current_device
from langgraph_devsched.hints import HintsError

HINTS_FILE = Path(__file__).with_name("hints.yaml")


@tool
def transcribe(clip: str) -> str:
    """Speech-to-text."""
    return f"transcript of {clip} on {current_device()}"


@tool
def read_text(image: str) -> str:
    """OCR."""
    return f"text of {image} on {current_device()}"


@tool
def embed(text: str) -> str:
    """Embed a text."""
    return f"vector of {text!r} on {current_device()}"


@tool
def detect(image: str) -> str:
    """Object detection."""
    return f"boxes in {image} on {current_device()}"


TOOLS = [transcribe, read_text, embed, detect]
TESTBED = SimulatedTestbed(
    {
        "transcribe": ToolParams(cpu_ms=900, gpu_ms=80, transfer_ms=5, vram_mb=1800),
        "read_text": ToolParams(cpu_ms=300, gpu_ms=40, vram_mb=2500, gpu_share=0.8),
        "embed": ToolParams(cpu_ms=40, gpu_ms=10, transfer_ms=45, vram_mb=400),
        "detect": ToolParams(cpu_ms=700, gpu_ms=60, vram_mb=3000, gpu_share=0.5),
    },
    vram_budget_mb=8000,
)


def main() -> None:
    # "static" follows the declared hints (pinned > preferred > solo profile)
    node = DeviceToolNode(TOOLS, hints=HINTS_FILE, testbed=TESTBED, scheduler="static")
    for name, spec in node.device_specs.items():
        print(f"{name}: allowed {', '.join(spec.allowed_options())}")

    calls = [
        {"name": "transcribe", "args": {"clip": "a.wav"}, "id": "1"},
        {"name": "read_text", "args": {"image": "scan.png"}, "id": "2"},
        {"name": "embed", "args": {"text": "hello"}, "id": "3"},
        {"name": "detect", "args": {"image": "street.jpg"}, "id": "4"},
    ]
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    result = graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})
    for message in result["messages"][1:]:
        print(f"{message.name}: {message.content}")

    try:
        DeviceToolNode(TOOLS, hints={"detect": {"pinned": "tpu"}})
    except HintsError as exc:
        print(f"rejected: {exc}")


if __name__ == "__main__":
    main()
