"""Scenario probes on the local backend's GPU ledger and CPU slots (real threads).

* `cancel_gpu_sync`: (1) ``ainvoke`` cancelled while a SYNC tool runs on the GPU: the ledger
  keeps its reservation until the tool's thread returns (sampled while it still runs), and
  the VRAM the tools really hold at once (each adds its VRAM on entry, subtracts it on exit)
  never exceeds the budget, even when another step asks for the GPU meanwhile; (2) a step
  cancelled while its calls wait in the GPU queue is closed and reported (``on_step``, the
  monitor) and leaves nothing queued.
* `oom_cpu_slots`: ``LocalBackend(cpu_workers=1)`` with tools that hit a GPU OOM and rerun
  on the CPU: the tools never run more than ``cpu_workers`` at once on the CPU.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from langgraph_devsched._dev.stress.kit import (
    Gauge,
    ProbeContext,
    ProbeResult,
    call_within,
    check_answered,
    graph_of,
    ledger_idle,
    make_tool,
    node_for,
    reports_into,
    step_input,
    wait_until,
    within,
)
from langgraph_devsched._dev.stress.tools import oom_error
from langgraph_devsched.device import current_device
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.node import StepReport

STEP_LIMIT_S = 5.0
HOLD_LIMIT_S = 5.0
BUDGET_MB = 1000.0


def cancel_gpu_sync(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    asyncio.run(_cancel_running(ctx, result))
    asyncio.run(_cancel_queued(ctx, result))
    return result


async def _cancel_running(ctx: ProbeContext, result: ProbeResult) -> None:
    vram = Gauge()
    entered, release = threading.Event(), threading.Event()

    def holder(payload: str) -> str:  # sync only: ainvoke runs it in a worker thread
        device = current_device()
        entered.set()
        with vram.held(800.0 if device != "cpu" else 0.0):
            release.wait(HOLD_LIMIT_S)
        return f"holder:{payload}@{device}"

    def grab(payload: str) -> str:
        device = current_device()
        with vram.held(800.0 if device != "cpu" else 0.0):
            time.sleep(0.01)
        return f"grab:{payload}@{device}"

    async def agrab(payload: str) -> str:
        return await asyncio.to_thread(grab, payload)

    hints: dict[str, dict[str, Any]] = {
        "holder": {"vram_mb": 800, "pinned": "gpu_now", "cpu_allowed": False},
        "grab": {"vram_mb": 800, "preferred": "gpu_now"},
    }
    node, ledger = node_for(
        ctx, [make_tool("holder", holder), make_tool("grab", grab, agrab)], hints,
        budget_mb=BUDGET_MB, scheduler="static", backend="local",
    )
    assert ledger is not None
    graph = graph_of(node)
    ok = True
    try:
        task = asyncio.ensure_future(graph.ainvoke(step_input([(f"h{ctx.index}", "holder")])))
        started = await wait_until(entered.is_set, 2.0)
        ok &= result.check(started, "the sync GPU tool never started")
        task.cancel()
        try:
            await asyncio.wait_for(task, 2.0)
            ok &= result.check(False, "the cancelled ainvoke returned instead of raising")
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            ok &= result.check(False, f"the cancelled ainvoke raised {type(exc).__name__}: {exc}")
        await asyncio.sleep(0.01)  # the cancellation's own cleanup runs
        if started and vram.count > 0:
            in_use = ledger.in_use_mb
            ok &= result.check(
                in_use >= 800.0 - 1e-6,
                f"cancelled: the ledger holds {in_use:.0f} MB while the sync tool's thread still "
                "runs with its 800 MB",
            )
            grab_step = step_input([(f"g{ctx.index}", "grab")])
            _, why = await within(graph.ainvoke(grab_step), STEP_LIMIT_S)
            ok &= result.check(why is None, f"a step after the cancellation: {why}")
            ok &= result.check(
                vram.peak <= BUDGET_MB + 1e-6,
                f"tools held {vram.peak:.0f} MB of VRAM at once, over the {BUDGET_MB:.0f} MB "
                "budget",
            )
    finally:
        release.set()
    done = await wait_until(lambda: vram.count == 0 and ledger_idle(ledger), 3.0)
    ok &= result.check(
        done, f"ledger not at 0 after the thread returned ({ledger.in_use_mb:.0f} MB, "
        f"{ledger.active} active, {ledger.queued} queued)",
    )
    result.count("running")
    result.case(ok)


async def _cancel_queued(ctx: ProbeContext, result: ProbeResult) -> None:
    async def waiter(payload: str) -> str:
        return f"waiter:{payload}@{current_device()}"

    def swaiter(payload: str) -> str:
        return f"waiter:{payload}@{current_device()}"

    reports: list[StepReport] = []
    monitor = RuntimeMonitor()
    hints: dict[str, dict[str, Any]] = {"waiter": {"vram_mb": 500, "pinned": "gpu_queued"}}
    node, ledger = node_for(
        ctx, [make_tool("waiter", swaiter, waiter)], hints, budget_mb=BUDGET_MB,
        queue_timeout_s=HOLD_LIMIT_S, backend="local", scheduler="static",
        on_step=reports_into(reports), monitor=monitor,
    )
    assert ledger is not None
    graph = graph_of(node)
    blocker = ledger.try_reserve(BUDGET_MB)  # the GPU is full: the calls queue
    ok = result.check(blocker is not None, "could not fill the ledger")
    try:
        ids = [f"q{ctx.index}a", f"q{ctx.index}b"]
        step = step_input([(ids[0], "waiter"), (ids[1], "waiter")])
        task = asyncio.ensure_future(graph.ainvoke(step))
        queued = await wait_until(lambda: ledger.queued >= 2, 2.0)
        ok &= result.check(queued, f"the calls never queued ({ledger.queued} queued)")
        task.cancel()
        try:
            await asyncio.wait_for(task, 2.0)
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            ok &= result.check(False, f"the cancelled ainvoke raised {type(exc).__name__}: {exc}")
        reported = await wait_until(lambda: len(reports) >= 1, 1.0)
        ok &= result.check(
            reported, "a step cancelled in the GPU queue was never closed (no StepReport)"
        )
        ok &= result.check(
            monitor.state.step >= 1, "the monitor never recorded the cancelled step"
        )
        ok &= result.check(len(reports) <= 1, f"{len(reports)} reports for one cancelled step")
        gone = await wait_until(lambda: ledger.queued == 0, 1.0)
        ok &= result.check(gone, f"{ledger.queued} waiter(s) left in the GPU queue")
    finally:
        if blocker is not None:
            ledger.release(blocker)
    idle = await wait_until(lambda: ledger_idle(ledger), 2.0)
    ok &= result.check(idle, f"ledger not at 0 ({ledger.in_use_mb:.0f} MB, {ledger.active} active)")
    result.count("queued")
    result.case(ok)


def oom_cpu_slots(ctx: ProbeContext, *, workers: int = 1) -> ProbeResult:
    result = ProbeResult()
    cpu = Gauge()

    def work(name: str) -> Any:
        def run(payload: str) -> str:
            device = current_device()
            if name == "oomer" and device != "cpu":
                raise oom_error()
            with cpu.held():
                time.sleep(0.005)
            return f"{name}:{payload}@{device}"

        async def arun(payload: str) -> str:
            device = current_device()
            if name == "oomer" and device != "cpu":
                raise oom_error()
            with cpu.held():
                await asyncio.sleep(0.005)
            return f"{name}:{payload}@{device}"

        return make_tool(name, run, arun)

    hints: dict[str, dict[str, Any]] = {
        "oomer": {"vram_mb": 200, "preferred": "gpu_now"},
        "cpuwork": {"gpu_capable": False},
    }
    node, ledger = node_for(
        ctx, [work("oomer"), work("cpuwork")], hints, cpu_workers=workers, backend="local",
        scheduler="static", handle_tool_errors=True,
    )
    graph = graph_of(node)
    calls = [(f"o{ctx.index}c{j}", "oomer" if j % 2 == 0 else "cpuwork") for j in range(5)]
    inputs = step_input(calls)
    run_async = ctx.rng.random() < 0.5
    mode = "async" if run_async else "sync"
    result.count(mode)
    if run_async:
        out, why = asyncio.run(within(graph.ainvoke(inputs), STEP_LIMIT_S))
    else:
        out, why = call_within(lambda: graph.invoke(inputs), STEP_LIMIT_S)
    ok = result.check(why is None, f"{mode} step: {why}")
    if why is None:
        ok &= check_answered(
            result, out, [c for c, _ in calls], f"{mode} step",
            expect=lambda cid, m: m.status != "error" and str(m.content).endswith("@cpu"),
        )
    ok &= result.check(
        cpu.max_count <= workers,
        f"{mode}: {cpu.max_count} CPU runs at once with cpu_workers={workers} (GPU OOM reruns "
        "on the CPU)",
    )
    idle = asyncio.run(wait_until(lambda: ledger_idle(ledger), 2.0))
    ok &= result.check(idle, "local ledger not back at 0")
    result.case(ok)
    return result
