"""Idle-time calibration runs what it measures and holds what it uses: a cut run of a sync
tool keeps its device until its thread returns, and the CPU side runs the tool's
``cpu_impl``. Driven through a compiled graph on the local backend."""

from __future__ import annotations

import asyncio
import threading
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
    StepReport,
    device_hints,
)
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase


class CalibrateOnce(SchedulerBase):
    """Every call of a step on ``step``; after the first step, one idle run on ``idle``."""

    name = "calibrate_once"

    def __init__(self, step: DeviceOption, idle: DeviceOption) -> None:
        self.step, self.idle = step, idle
        self.first: Batch | None = None
        self.asked = False

    def decide(self, batch, view):  # type: ignore[no-untyped-def]
        return Decision(dict.fromkeys(batch.call_ids, self.step), "fixed")

    def observe(self, batch, decision, record):  # type: ignore[no-untyped-def]
        if self.first is None and batch.calls:
            self.first = Batch.of([(c.call_id, c.tool, c.spec) for c in batch.calls[:1]])

    def calibration(self) -> tuple[Batch, Decision] | None:
        if self.first is None or self.asked:
            return None
        self.asked = True
        return self.first, Decision({self.first.call_ids[0]: self.idle}, "idle run")


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(call_id: str) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=[
        {"name": "embed", "args": {"text": call_id}, "id": call_id}])]}


@pytest.mark.parametrize("side", ["gpu", "cpu"])
async def test_a_cut_idle_run_of_a_sync_tool_holds_its_device_until_its_thread_returns(side):
    started, release = threading.Event(), threading.Event()

    @device_hints(vram_mb=6000, idempotent=True)
    @tool
    def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Blocks in its idle re-run until released."""
        if text == "a" and started.is_set() is False and runs:  # the idle re-run
            started.set()
            release.wait(30)
        runs.append((text, device))
        return "vector"

    runs: list[tuple[str, str]] = []
    reports: list[StepReport] = []
    on, off = ("cpu", "gpu_now") if side == "gpu" else ("gpu_now", "cpu")
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=8000), cpu_workers=1)
    node = DeviceToolNode([embed], scheduler=CalibrateOnce(on, off), backend=backend,
                          idle_calibration=True, on_step=reports.append)
    app = graph(node)
    await app.ainvoke(step("a"))
    assert await asyncio.to_thread(started.wait, 10)  # the idle run's thread holds its side
    slots, ledger = backend.cpu_slots, backend.ledger
    assert slots is not None and ledger is not None
    try:
        if side == "gpu":  # the next call on the GPU does not fit beside the cut run's 6000
            node.scheduler.step = "gpu_now"  # type: ignore[attr-defined]
            out = await app.ainvoke(step("b"))
            (rec,) = reports[-1].record.calls
            assert (rec.device, rec.fallback) == ("cpu", "oom")
            assert ledger.in_use_mb == 6000  # the cut run's thread still holds its VRAM
        else:  # its CPU slot (cpu_workers=1) stays taken while the thread runs
            out = await app.ainvoke(step("b"))
            assert slots.in_use_mb == 1
        assert [m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)] == ["b"]
    finally:
        release.set()
    for _ in range(200):  # the thread returns: what it held goes back
        if ledger.in_use_mb == 0 and slots.in_use_mb == 0:
            break
        await asyncio.sleep(0.01)
    assert ledger.in_use_mb == 0 and slots.in_use_mb == 0


async def test_idle_calibration_of_the_cpu_side_runs_the_cpu_impl():
    ran: list[str] = []

    def cpu_version(text: str) -> str:
        """The CPU implementation."""
        ran.append(f"cpu_impl:{text}")
        return "vector"

    @device_hints(vram_mb=100, idempotent=True, cpu_impl=cpu_version)
    @tool
    def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """The GPU body (a stub on the CPU)."""
        ran.append(f"own:{text}:{device}")
        return "vector"

    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([embed], scheduler=CalibrateOnce("gpu_now", "cpu"), backend=backend,
                          idle_calibration=True)
    await graph(node).ainvoke(step("a"))
    assert node.idle is not None
    await node.idle.join()
    assert ran == ["own:a:cuda:0", "cpu_impl:a"]  # the step on the GPU, the idle run on cpu_impl
