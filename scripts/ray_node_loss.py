"""Manual check: a GPU node dies mid-call on a real multi-node Ray cluster (several raylets
on this machine via `ray.cluster_utils.Cluster`); the call is placed again and answered once.

Run: ``.venv/bin/python scripts/ray_node_loss.py`` (about a minute; exits 1 on failure).
Not part of the test suite: it starts its own Ray cluster.
"""

from __future__ import annotations

import threading
import time

import ray
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from ray.cluster_utils import Cluster

from langgraph_devsched import DeviceToolNode, StepReport, current_placement
from langgraph_devsched.executors import RayBackend


@tool
def slow(text: str) -> str:
    """Takes 20 s on a GPU, no time on the CPU."""
    placement = current_placement()
    if placement is not None and placement.on_gpu:
        time.sleep(20)
    return f"{text} on {placement.device if placement else None}"


def main() -> int:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    gpu_node = cluster.add_node(num_cpus=1, num_gpus=1, resources={"VRAM_MB": 4000})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        backend = RayBackend(max_retries=3, lost_call_retries=1)
        reports: list[StepReport] = []
        node = DeviceToolNode(
            [slow],
            hints={"slow": {"vram_mb": 1000, "pinned": "gpu_now"}},
            backend=backend,
            on_step=reports.append,
        )
        graph = StateGraph(MessagesState).add_node("tools", node)
        app = graph.add_edge(START, "tools").compile()
        killer = threading.Timer(8.0, cluster.remove_node, args=(gpu_node,))
        killer.start()
        calls = [{"name": "slow", "args": {"text": "x"}, "id": "1"}]
        out = app.invoke({"messages": [AIMessage("", tool_calls=calls)]})
        answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        record = reports[0].record
        assert record is not None
        call = record.calls[0]
        print("answers:", [(m.status, m.content) for m in answers])
        print("record:", call.device, call.fallback, call.error)
        ok = (
            len(answers) == 1
            and answers[0].content == "x on cpu"
            and call.fallback == "no_gpu"
            and all(s.ledger.in_use_mb == 0 for s in backend._slots.values())
        )
        print("OK" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
