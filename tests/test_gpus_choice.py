"""The GPU that can take a call gets it: every scheduler and the default rule know what each
GPU holds once its idle models are evicted, each GPU's concurrency cap, and what running
calls (other steps' included) reserve. Driven through compiled graphs on the simulated
testbed and the local backend."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

import pytest
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
from langgraph_devsched.executors.simulated import SimulatedBackend
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Decision, SchedulerBase
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

BIG = {"vram_mb": 14000, "weights_mb": 1000, "model": "bigm",
       "profile": {"cpu_ms": 20000, "gpu_ms": 200}}


def app(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def calls(*items: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=[
        {"name": name, "args": {"text": cid}, "id": cid} for name, cid in items])]}


@tool
def big(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Needs 14000 MB of working memory and 1000 MB of weights."""
    return device


class Fixed(SchedulerBase):
    """Each call on ``option``, on the GPU ``gpus`` names (else the default rule)."""

    name = "fixed"

    def __init__(self, option: DeviceOption, gpus: dict[str, int] | None = None) -> None:
        self.option, self.named = option, gpus or {}

    def decide(self, batch, view):  # type: ignore[no-untyped-def]
        return Decision(dict.fromkeys(batch.call_ids, self.option), "fixed",
                        gpus={c: g for c, g in self.named.items() if c in batch.call_ids})


def local_with_idle_model() -> LocalBackend:
    """8 GB and 24 GB; the 24 GB one holds an idle 17 GB model (evictable)."""
    backend = LocalBackend(gpu=[GpuConfig(8000, "cuda:0"), GpuConfig(24000, "cuda:1")])
    idle = ResidentModel("idle17", lambda device: device, weights_mb=17000)

    @device_hints(**idle.hints(vram_mb=0))
    @tool
    def warm(text: str) -> str:
        """Loads the 17 GB model."""
        return idle.get()

    app(DeviceToolNode([warm], scheduler=Fixed("gpu_now", {"w": 1}), backend=backend)).invoke(
        calls(("warm", "w")))
    assert [(w.model, w.in_use, w.keep_warm) for w in backend.caches[1].resident()] == [
        ("idle17", 0, False)]
    return backend


def simulated_with_idle_model() -> SimulatedBackend:
    params = {"big": ToolParams(cpu_ms=20000, gpu_ms=200, vram_mb=14000, weights_mb=1000,
                                model="bigm"),
              "idle17": ToolParams(cpu_ms=10, gpu_ms=10, weights_mb=17000)}
    return SimulatedBackend(SimulatedTestbed(
        params, gpus=[GpuSpec(vram_mb=8000), GpuSpec(vram_mb=24000, resident=("idle17",))]))


@pytest.mark.parametrize("scheduler", ["monitor", "all_gpu", "heft", "dmda", "ucb", "static"])
@pytest.mark.parametrize("backend", ["simulated", "local"])
def test_the_only_gpu_that_fits_after_an_eviction_gets_the_call(scheduler, backend):
    bed = simulated_with_idle_model() if backend == "simulated" else local_with_idle_model()
    node = DeviceToolNode([big], hints={"big": BIG}, scheduler=scheduler, backend=bed)
    out = app(node).invoke(calls(("big", "b")))
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["cuda:1"]
    (rec,) = node.history[-1].record.calls  # type: ignore[union-attr]
    assert (rec.device, rec.fallback, rec.evicted) == ("cuda:1", None, ("idle17",))
    if backend == "simulated":
        assert rec.end_ms - rec.start_ms == pytest.approx(200.0)


@device_hints(vram_mb=100)
@tool
def ocr(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Runs where it is placed."""
    return device


@pytest.mark.parametrize("option", ["gpu_now", "gpu_queued"])
def test_a_step_spreads_over_gpus_at_their_cap(option):
    # GPU 0 has the most free VRAM, but its cap (1) is taken by the step's first call
    backend = LocalBackend(gpu=[GpuConfig(24000, "cuda:0"), GpuConfig(8000, "cuda:1")],
                           gpu_concurrency=1, queue_timeout_s=30)
    node = DeviceToolNode([ocr], scheduler=Fixed(option), backend=backend)
    out = app(node).invoke(calls(("ocr", "a"), ("ocr", "b")))
    assert sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage)) == [
        "cuda:0", "cuda:1"]
    assert all(c.fallback is None for c in node.history[-1].record.calls)  # type: ignore[union-attr]


FAST_ON_GPU = {"vram_mb": 100, "profile": {"cpu_ms": 2000, "gpu_ms": 20}}


@pytest.mark.parametrize("scheduler", ["gpu_now", "gpu_queued", "monitor", "all_gpu", "heft",
                                       "dmda", "ucb", "static"])
async def test_a_call_goes_to_the_idle_gpu_while_another_steps_call_holds_the_cap(scheduler):
    other_done = asyncio.Event()

    @device_hints(**FAST_ON_GPU)
    @tool
    async def slow(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Holds its GPU until the other step's call has answered (or 5 s)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(other_done.wait(), 5)
        return device

    backend = LocalBackend(gpu=[GpuConfig(24000, "cuda:0"), GpuConfig(8000, "cuda:1")],
                           gpu_concurrency=1, queue_timeout_s=30)
    first = DeviceToolNode([slow], scheduler=Fixed("gpu_now"), backend=backend)
    chosen = Fixed(scheduler) if scheduler.startswith("gpu_") else scheduler
    second = DeviceToolNode([ocr], hints={"ocr": FAST_ON_GPU}, scheduler=chosen,
                            backend=backend)
    held = asyncio.ensure_future(app(first).ainvoke(calls(("slow", "s"))))
    for _ in range(5000):  # until the first step's call runs on cuda:0
        if backend.ledgers[0].active:
            break
        await asyncio.sleep(0.001)
    out = await app(second).ainvoke(calls(("ocr", "o")))
    other_done.set()
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["cuda:1"]
    (rec,) = second.history[-1].record.calls  # type: ignore[union-attr]
    assert rec.fallback is None
    assert [m.content for m in (await held)["messages"] if isinstance(m, ToolMessage)] == [
        "cuda:0"]
    assert [ledger.in_use_mb for ledger in backend.ledgers] == [0.0, 0.0]
