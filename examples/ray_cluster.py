"""Tool calls scheduled onto a Ray cluster: each call runs as a Ray task.

Without arguments the script starts a local Ray instance that declares one *logical* GPU and
8000 MB of the ``VRAM_MB`` resource (no real GPU needed: the tools only report where they ran).
Give ``--address`` to use a real cluster (see docs/ray.md for starting one).

Run: ``python examples/ray_cluster.py`` (or ``--address ray://head:10001`` / ``auto``)
"""

from __future__ import annotations

import argparse
import os
from typing import Annotated, Any

import ray
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, InjectedDevice, StepReport
from langgraph_devsched.executors import RayBackend


@tool
def embed(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Embed a text."""
    return f"embedding of {text!r} on {device} (pid {os.getpid()})"


@tool
def caption(image: str, device: Annotated[str, InjectedDevice]) -> str:
    """Caption an image."""
    return f"caption of {image} on {device} (pid {os.getpid()})"


@tool
def ocr(image: str, device: Annotated[str, InjectedDevice]) -> str:
    """Read the text in an image."""
    return f"text of {image} on {device} (pid {os.getpid()})"


HINTS = {
    # half a GPU and 3 GB each: two embeddings share the GPU; start now or fall back to the CPU
    "embed": {"vram_mb": 3000, "gpu_share": 0.5, "pinned": "gpu_now"},
    # 5 GB: waits for the GPU when the embeddings hold it
    "caption": {"vram_mb": 5000, "pinned": "gpu_queued"},
    # transfer-bound: the CPU
    "ocr": {"pinned": "cpu"},
}


def main(address: str | None) -> None:
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=2, num_gpus=1, resources={"VRAM_MB": 8000}, include_dashboard=False)
    backend = RayBackend()
    print(backend.device_state())
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [embed, caption, ocr], hints=HINTS, backend=backend, on_step=reports.append
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    calls: list[Any] = [
        {"name": "embed", "args": {"text": "hello"}, "id": "e1"},
        {"name": "embed", "args": {"text": "world"}, "id": "e2"},
        {"name": "caption", "args": {"image": "cat.png"}, "id": "c1"},
        {"name": "ocr", "args": {"image": "scan.png"}, "id": "o1"},
    ]
    out = graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})
    for message in out["messages"]:
        if isinstance(message, ToolMessage):
            print(f"{message.tool_call_id}: {message.content}")
    record = reports[-1].record
    assert record is not None
    for call in record.calls:
        print(
            f"{call.call_id:3} {call.option:10} ran on {call.device:18} node={call.node} "
            f"fallback={call.fallback} peers={call.gpu_peers}"
        )
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="Ray cluster address (default: a local instance)")
    main(parser.parse_args().address)
