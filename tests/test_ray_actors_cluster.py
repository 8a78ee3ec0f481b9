"""Resident models on a Ray cluster of several nodes (raylets on this machine through
`ray.cluster_utils.Cluster`): a head without GPUs and two nodes with 1 and 2 logical GPUs.
A call the decision places on a GPU slot runs in that slot's actor, on that slot's node,
told that node's GPU index."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, ResidentModel, current_device
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from langgraph_devsched.executors import RayBackend  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TINY = ResidentModel("tiny", lambda device: device, weights_mb=1000)


@tool
def embed(text: str) -> str:
    """Embed (reports the node, the device and the process)."""
    return json.dumps({"loaded_on": TINY.get(), "device": current_device(), "pid": os.getpid(),
                       "node": ray.get_runtime_context().get_node_id()})


class OnSlot(SchedulerBase):
    name = "on_slot"

    def __init__(self) -> None:
        self.slot = 0

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        ids = [c.call_id for c in batch.calls]
        return self._decision(dict.fromkeys(ids, "gpu_now"), "test",
                              gpus=dict.fromkeys(ids, self.slot))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes.add_node(num_cpus=1, num_gpus=1, resources={"VRAM_MB": 4000})
    nodes.add_node(num_cpus=1, num_gpus=2, resources={"VRAM_MB": 8000})
    ray.init(address=nodes.address, log_to_driver=False, configure_logging=False)
    nodes.wait_for_nodes()
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def test_each_slot_of_each_node_has_its_actor_on_that_node(cluster: Any) -> None:
    backend = RayBackend()
    scheduler = OnSlot()
    node = DeviceToolNode([embed], hints={"embed": TINY.hints(vram_mb=500)},
                          backend=backend, scheduler=scheduler)
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    assert len(backend.device_state().devices) == 3  # one GpuDevice per slot
    slots = backend.slots()
    assert [s.index for s in slots].count(1) == 1 and len(slots) == 3
    seen = {}
    for i, slot in enumerate(slots):
        scheduler.slot = i
        for round_ in (1, 2):
            out = app.invoke({"messages": [AIMessage("", tool_calls=[
                {"name": "embed", "args": {"text": "x"}, "id": f"s{i}r{round_}"}])]})
            (msg,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
            got = json.loads(str(msg.content))
            assert (got["node"], got["device"]) == (slot.node_id, f"cuda:{slot.index}")
            seen.setdefault(i, set()).add(got["pid"])
    assert all(len(pids) == 1 for pids in seen.values())  # one actor per slot, warm again
    assert len(set().union(*seen.values())) == 3  # three actors
    handles = backend.hosts.handles()
    stats = {key: ray.get(h.stats.remote()) for key, h in handles.items()}
    assert sorted(stats) == sorted(s.key for s in slots)
    assert all((s.loads, s.hits) == (1, 1) for s in stats.values())
    node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


@tool
def plain(text: str) -> str:
    """A GPU tool on no resident model: the node, the device it was told, Ray's GPU ids."""
    ctx = ray.get_runtime_context()
    return json.dumps({"device": current_device(), "node": ctx.get_node_id(),
                       "ray_gpus": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]})


def test_a_call_on_no_resident_model_runs_on_its_slots_gpu(cluster: Any) -> None:
    """A task per call, on the slot's node and GPU: the 1-GPU node's task holds Ray's GPU
    (its only one, cuda:0); a task on the 2-GPU node holds none and is told its slot's
    index (Ray would pick either GPU)."""
    backend = RayBackend()
    scheduler = OnSlot()
    node = DeviceToolNode([plain], hints={"plain": {"vram_mb": 500, "gpu_share": 0.5}},
                          backend=backend, scheduler=scheduler)
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    backend.device_state()
    for i, slot in enumerate(backend.slots()):
        scheduler.slot = i
        out = app.invoke({"messages": [AIMessage("", tool_calls=[
            {"name": "plain", "args": {"text": "x"}, "id": f"p{i}"}])]})
        (msg,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        got = json.loads(str(msg.content))
        two = backend.node(slot.node_id).gpus == 2  # type: ignore[union-attr]
        assert (got["node"], got["device"]) == (slot.node_id, f"cuda:{slot.index}")
        assert got["ray_gpus"] == ([] if two else ["0"])
    node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())
