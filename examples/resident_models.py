"""Resident models: torch tools that keep their weights loaded between calls (runs on a CPU).

Each tool owns its model through a `ResidentModel` handle and asks it for the instance on the
device its call was placed on. The first call loads it (a cold start), the next ones find it
warm; the node's records and traces say which. On a GPU the weights are accounted in the VRAM
ledger and evicted least-recently-used when another model needs their room.

    python examples/resident_models.py

prints, on any machine (the model sizes are small)::

    step 1: embed loaded 'encoder' on cpu; classify loaded 'classifier' on cpu
    step 2: embed warm 'encoder' on cpu; classify warm 'classifier' on cpu
    resident: classifier (cpu), encoder (cpu)
    after close: nothing resident
"""

from __future__ import annotations

from typing import Any

import torch
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, LocalBackend, ResidentModel, device_hints


def build_encoder(device: str) -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights in every process
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 32))
    return net.eval().to(device)


def build_classifier(device: str) -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Linear(32, 4).eval().to(device)


def free(module: torch.nn.Module) -> None:
    module.to("cpu")  # on a GPU: the weights leave it; the cache then empties CUDA's cache


encoder = ResidentModel("encoder", build_encoder, weights_mb=0.1, release=free)
classifier = ResidentModel("classifier", build_classifier, weights_mb=0.01, release=free)


def features(text: str) -> torch.Tensor:
    codes = torch.tensor([ord(c) % 64 for c in text[:64]] or [0])
    return torch.nn.functional.one_hot(codes, 64).float().mean(0, keepdim=True)


@device_hints(**encoder.hints(vram_mb=50, profile={"cpu_ms": 1, "gpu_ms": 1}))
@tool
def embed(text: str) -> str:
    """Embed a text into 32 numbers."""
    model = encoder.get()  # the instance on this call's device, loaded on first use there
    with torch.no_grad():
        vector = model(features(text).to(next(model.parameters()).device))
    return f"{vector.norm():.3f}"


@device_hints(**classifier.hints(vram_mb=20, profile={"cpu_ms": 1, "gpu_ms": 1}))
@tool
def classify(text: str) -> str:
    """Sort a text into one of four classes."""
    enc, head = encoder.get(), classifier.get()
    with torch.no_grad():
        label = head(enc(features(text))).argmax().item()
    return f"class {label}"


def main() -> None:
    backend = LocalBackend()  # this machine: its GPU when there is one, else the CPU
    node = DeviceToolNode([embed, classify], backend=backend)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    calls: list[Any] = [{"name": "embed", "args": {"text": "hello"}, "id": "e"},
                        {"name": "classify", "args": {"text": "hello"}, "id": "c"}]
    for n in (1, 2):
        graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})
        said = []
        for call in node.history[-1].record.calls:
            how = "loaded" if call.loaded else "warm"
            said.append(f"{call.tool} {how} {call.model!r} on {call.device}")
        print(f"step {n}: " + "; ".join(sorted(said, key=lambda s: s.startswith("classify"))))
    warm = sorted(f"{w.model} ({w.side})" for w in backend.device_state().resident)
    print("resident: " + ", ".join(warm))
    node.close()
    print("after close: " + (", ".join(w.model for w in backend.device_state().resident)
                             or "nothing resident"))


if __name__ == "__main__":
    main()
