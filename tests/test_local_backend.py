"""The local executor with real threads: admission, OOM fallback, forbidden CPU, cancellation.

The GPU here is a declared `GpuConfig` (no CUDA needed): the ledger and placements are real,
the tools run on the CPU and read the device they were given.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import pytest
import torch
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
from langgraph_devsched.schedulers import AllGpuScheduler


def tools_graph(node: DeviceToolNode):
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*calls: tuple[str, str]) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": {"text": i}, "id": i} for n, i in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def test_no_gpu_runs_gpu_options_on_the_cpu_and_says_why():
    @device_hints(vram_mb=100)
    @tool
    def where(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Report the device."""
        return device

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=False)
    assert backend.device_state().reason == "GPU disabled (gpu=False)"
    node = DeviceToolNode(
        [where], scheduler=AllGpuScheduler(), backend=backend, on_step=reports.append
    )
    out = answers(tools_graph(node).invoke(step(("where", "a"))))
    assert out["a"].content == "cpu"
    # all_gpu sees no GPU in the telemetry and asks for the CPU: nothing to fall back from
    assert reports[0].record is not None and reports[0].record.calls[0].fallback is None


def test_queued_calls_wait_for_vram_while_gpu_now_falls_back():
    gate = threading.Event()
    running: list[str] = []

    @device_hints(vram_mb=700)
    @tool
    def big(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Hold 700 MB until released."""
        running.append(text)
        gate.wait(10)
        return device

    class Plan(AllGpuScheduler):
        def decide(self, batch, view):  # type: ignore[no-untyped-def]
            options = {"q1": "gpu_queued", "q2": "gpu_queued", "now": "gpu_now", "cpu": "cpu"}
            return self._decision({c: options[c] for c in batch.call_ids}, "plan")

    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    ledger = backend.ledger
    assert ledger is not None
    other_user = ledger.try_reserve(700)  # someone else holds 700 MB when the step starts
    assert other_user is not None
    reports: list[StepReport] = []
    node = DeviceToolNode([big], scheduler=Plan(), backend=backend, on_step=reports.append)
    result: dict[str, Any] = {}
    calls = step(("big", "q1"), ("big", "q2"), ("big", "now"), ("big", "cpu"))
    worker = threading.Thread(target=lambda: result.update(tools_graph(node).invoke(calls)))
    worker.start()

    def until(condition: Any) -> None:  # bounded wait for the threads to get there
        for _ in range(1000):
            if condition():
                return
            gate.wait(0.01)
        raise AssertionError("the step did not get there")

    until(lambda: sorted(running) == ["cpu", "now"] and ledger.queued == 2)
    ledger.release(other_user)  # the queue head is admitted; the other stays queued
    until(lambda: len(running) == 3)
    assert ledger.in_use_mb == 700 and ledger.queued == 1
    gate.set()
    worker.join(10)
    out = answers(result)
    assert {k: m.content for k, m in out.items()} == {
        "q1": "cuda:0",
        "q2": "cuda:0",
        "now": "cpu",
        "cpu": "cpu",
    }
    record = reports[0].record
    assert record is not None
    by_id = record.by_id()
    assert by_id["now"].fallback == "oom" and by_id["cpu"].fallback is None
    first, second = sorted((by_id["q1"], by_id["q2"]), key=lambda c: c.start_ms)
    assert second.start_ms >= first.end_ms  # the queued calls never shared the GPU
    assert ledger.in_use_mb == 0 and ledger.active == 0


@pytest.mark.parametrize("handle_tool_errors", [True, False])
def test_cuda_oom_inside_a_tool_reruns_it_on_the_cpu(handle_tool_errors: bool):
    attempts: list[str] = []

    @device_hints(vram_mb=200)
    @tool
    def fragile(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """OOM on the GPU, fine on the CPU."""
        attempts.append(device)
        if device != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return "ok on cpu"

    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [fragile],
        scheduler=AllGpuScheduler(),
        backend=backend,
        handle_tool_errors=handle_tool_errors,
        on_step=reports.append,
    )
    out = answers(tools_graph(node).invoke(step(("fragile", "a"))))
    assert out["a"].content == "ok on cpu" and out["a"].status != "error"
    assert attempts == ["cuda:0", "cpu"]
    record = reports[0].record
    assert record is not None
    assert (record.calls[0].device, record.calls[0].fallback) == ("cpu", "oom")
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0


def test_oom_with_cpu_forbidden_is_one_error_answer():
    @device_hints(vram_mb=5000, cpu_allowed=False)
    @tool
    def gpu_only(text: str) -> str:
        """Needs more VRAM than there is."""
        return "never"

    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([gpu_only], backend=backend)
    out = answers(tools_graph(node).invoke(step(("gpu_only", "a"))))
    assert out["a"].status == "error"
    assert "needs 5000 MB of VRAM, the budget allows 1000 MB" in str(out["a"].content)
    assert "forbid the CPU" in str(out["a"].content)


async def test_cancelled_async_step_releases_its_reservations():
    started = asyncio.Event()

    @device_hints(vram_mb=600)
    @tool
    async def slow(text: str) -> str:
        """Never finishes on its own."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    class Queue(AllGpuScheduler):
        def decide(self, batch, view):  # type: ignore[no-untyped-def]
            return self._decision(dict.fromkeys(batch.call_ids, "gpu_queued"), "queue all")

    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([slow], scheduler=Queue(), backend=backend)
    task = asyncio.create_task(tools_graph(node).ainvoke(step(("slow", "a"), ("slow", "b"))))
    await started.wait()
    assert backend.ledger is not None
    assert backend.ledger.in_use_mb == 600 and backend.ledger.queued == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):  # let the cancelled inner tasks run their cleanup (bounded)
        if backend.ledger.active == 0:
            break
        await asyncio.sleep(0.01)
    assert backend.ledger.in_use_mb == 0
    assert backend.ledger.queued == 0 and backend.ledger.active == 0
