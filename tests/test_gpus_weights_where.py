"""Weights count where they live: a tool running on ``cuda:0`` that asks for
``ResidentModel.get("cuda:1")`` loads the model into cuda:1's cache, its weights in cuda:1's
ledger, so the next call on cuda:1 is admitted against them (an idle model evicted, its
instance released) and the memory really on each GPU stays within its budget."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    ResidentModel,
    device_hints,
)
from langgraph_devsched.schedulers.base import Decision, SchedulerBase

BUDGET = 8000.0


class OnGpu(SchedulerBase):
    """Each call ``gpu_now`` on the GPU its id names (``x@1``)."""

    name = "on_gpu"

    def decide(self, batch, view):  # type: ignore[no-untyped-def]
        ids = batch.call_ids
        return Decision(dict.fromkeys(ids, "gpu_now"), "pinned",
                        gpus={c: int(c.rsplit("@", 1)[1]) for c in ids})


def test_weights_loaded_on_another_gpu_count_on_that_gpus_ledger():
    really: dict[str, float] = {"cuda:0": 0.0, "cuda:1": 0.0}
    peaks: list[tuple[str, float]] = []

    def load(device: str) -> str:
        really[device] += 3000
        return device

    def release(instance: str) -> None:
        really[instance] -= 3000

    big = ResidentModel("big", load, weights_mb=3000, release=release)

    @device_hints(vram_mb=100)
    @tool
    def helper(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Runs on one GPU, loads a model on the other."""
        return f"{big.get('cuda:1')} from {device}"

    @device_hints(vram_mb=7000)
    @tool
    def heavy(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Needs 7000 MB where it runs."""
        really[device] += 7000
        peaks.append((device, really[device]))
        really[device] -= 7000
        return device

    backend = LocalBackend(gpu=[GpuConfig(BUDGET, "cuda:0"), GpuConfig(BUDGET, "cuda:1")])
    node = DeviceToolNode([helper, heavy], scheduler=OnGpu(), backend=backend)
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()

    def step(name: str, call_id: str) -> Any:
        call = {"name": name, "args": {"text": "x"}, "id": call_id}
        out = app.invoke({"messages": [AIMessage("", tool_calls=[call])]})
        return [m.content for m in out["messages"] if isinstance(m, ToolMessage)]

    assert step("helper", "h@0") == ["cuda:1 from cuda:0"]
    zero, one = backend.ledgers
    assert (zero.weights_mb, one.weights_mb) == (0.0, 3000.0)  # counted where it lives
    assert [w.model for w in backend.caches[1].resident()] == ["big"]
    assert [w.model for w in backend.caches[0].resident()] == []
    step("heavy", "k@1")  # 7000 MB on cuda:1: the idle model goes first
    assert all(mb <= BUDGET for _, mb in peaks), peaks
    assert max(really.values()) <= BUDGET and one.in_use_mb <= BUDGET
    assert zero.in_use_mb == 0.0
    backend.close()
    assert really == {"cuda:0": 0.0, "cuda:1": 0.0}
    assert zero.in_use_mb == one.in_use_mb == 0.0
