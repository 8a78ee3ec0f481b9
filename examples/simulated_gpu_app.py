"""Your own PyTorch tools, scheduled on a simulated GPU, running on this machine's CPU.

Two real torch tools (small ``nn.Module``s) ask for their device with ``InjectedDevice``. The
node plans every step for a simulated 8 GB GPU built from the tools' hints
(`simulated_gpu`): placement, VRAM ledger and latencies follow the simulation, while the
tools' own code runs on the CPU (``run_tools_on="cpu"``), so nothing needs CUDA. It prints
each decision and each tool's real answer. See docs/simulated_gpu.md.

Run: ``python examples/simulated_gpu_app.py``. Profile the same tools with
``cd examples && devsched profile --suite simulated_gpu_app:TOOLS --devices cpu``.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import torch
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from torch import nn

from langgraph_devsched import DeviceToolNode, InjectedDevice
from langgraph_devsched.profiling import EXAMPLE_ARGS_KEY, simulated_gpu


@cache
def _image_model(device: str) -> nn.Module:
    with torch.random.fork_rng():  # seeded weights, the global generator left alone
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(8 * 16, 10),
        )
    return model.to(device).eval()


@cache
def _text_model(device: str) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(1)
        model = nn.EmbeddingBag(256, 32, mode="mean")
    return model.to(device).eval()


@tool
def classify_image(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Classify a (generated) 32x32 image into one of 10 classes."""
    image = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = _image_model(device)(image.to(device))
    return f"image {seed}: class {int(logits.argmax())} (computed on {device})"


@tool
def embed_text(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Embed a text into 32 numbers (byte-level bag of embeddings)."""
    ids = torch.tensor([list(text.encode("utf-8"))], device=device)
    with torch.no_grad():
        vector = _text_model(device)(ids)[0]
    return f"embedding of {text!r}: {vector.numel()} numbers (computed on {device})"


# what `devsched profile --suite simulated_gpu_app:TOOLS` calls each tool with
classify_image.metadata = {EXAMPLE_ARGS_KEY: {"seed": 7}}
embed_text.metadata = {EXAMPLE_ARGS_KEY: {"text": "hello"}}
TOOLS = [classify_image, embed_text]

# declared solo latencies of a GPU machine (from `devsched profile --hints-out` on one, or
# estimates): the image model is 12x faster on the GPU, the text lookup is not worth a copy
HINTS: dict[str, dict[str, Any]] = {
    "classify_image": {"vram_mb": 3000, "profile": {"cpu_ms": 360, "gpu_ms": 30, "transfer_ms": 5}},
    "embed_text": {"vram_mb": 200, "profile": {"cpu_ms": 12, "gpu_ms": 20, "transfer_ms": 10}},
}


def build_graph() -> tuple[Any, DeviceToolNode]:
    testbed = simulated_gpu(HINTS, vram_budget_mb=8000, run_tools_on="cpu")
    node = DeviceToolNode(TOOLS, hints=HINTS, testbed=testbed)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    return graph, node


def main() -> None:
    graph, node = build_graph()
    step = AIMessage("", tool_calls=[
        {"name": "classify_image", "args": {"seed": 1}, "id": "c1"},
        {"name": "classify_image", "args": {"seed": 2}, "id": "c2"},
        {"name": "classify_image", "args": {"seed": 3}, "id": "c3"},
        {"name": "embed_text", "args": {"text": "hello"}, "id": "c4"},
    ])
    result = graph.invoke({"messages": [step]})
    report = node.history[-1]
    print(f"one decision by {report.scheduler!r} for {len(report.record.calls)} calls:")
    for call in report.record.calls:
        print(f"  {call.call_id} {call.tool}: {call.option} on {call.device} (simulated), "
              f"{call.latency_ms:.0f} ms")
    print(f"simulated makespan: {report.record.makespan_ms:.0f} ms, "
          f"VRAM peak {report.record.vram_peak_mb:.0f} of 8000 MB")
    for message in result["messages"][1:]:
        print(f"{message.name}: {message.content}")


if __name__ == "__main__":
    main()
