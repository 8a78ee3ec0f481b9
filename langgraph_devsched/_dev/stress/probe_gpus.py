"""Scenario probes on a machine with several GPUs: where weights count, which GPU a call gets.

* `cross_gpu_get` (local): a tool placed on GPU a asks for ``ResidentModel.get("cuda:b")``;
  then a 7,000 MB call runs on GPU b. Every GPU's ledger is a `live.LiveLedger` compared with
  the live instances on that GPU at every grant and release: the weights count on GPU b,
  what is really on each GPU stays within its budget, at rest the live instances of every
  GPU are its ledger's residents, and all is 0 after ``close``.
* `cap_beside_idle` (local): ``gpu_concurrency=1``; another step's call holds the GPU with
  the most free VRAM; a step of 1..k-1 calls (``gpu_now`` or ``gpu_queued``, no GPU named)
  runs on the idle GPUs at once, none on the busy one, none on the CPU.
* `evictable_only_fit` (both): GPUs of 8,000 MB and one of 24,000 MB holding an idle
  17,000 MB model; a call needing 14,000 + 1,000 MB, under a drawn scheduler, runs on the
  24,000 MB GPU (the idle model evicted), never on the CPU.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    answers,
    call_within,
    check_answered,
    graph_of,
    ledger_idle,
    make_tool,
    step_input,
    wait_until,
    within,
)
from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels, live_gpus_backend
from langgraph_devsched._dev.stress.models_kit import RunGate
from langgraph_devsched.device import current_device
from langgraph_devsched.executors.simulated import SimulatedBackend
from langgraph_devsched.node import DeviceToolNode
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

STEP_LIMIT_S = 10.0
SCHEDULERS = ("monitor", "all_gpu", "heft", "dmda", "ucb", "static")
"""The schedulers `evictable_only_fit` draws from (each names the GPU its own way)."""


class Named(SchedulerBase):
    """Each call on ``option``, on the GPU ``gpus`` names by tool (else the default rule)."""

    name = "named"

    def __init__(self, option: DeviceOption, gpus: Mapping[str, int] | None = None) -> None:
        self.option, self.by_tool = option, dict(gpus or {})

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        named = {c.call_id: self.by_tool[c.tool] for c in batch.calls if c.tool in self.by_tool}
        return self._decision(dict.fromkeys(batch.call_ids, self.option), "named", gpus=named)


def run_step(graph: Any, inputs: dict[str, Any], asynchronous: bool) -> tuple[Any, str | None]:
    """One step, sync or async, bounded in time: ``(output, None)`` or ``(None, why)``."""
    if asynchronous:
        return asyncio.run(within(graph.ainvoke(inputs), STEP_LIMIT_S))
    return call_within(functools.partial(graph.invoke, inputs), STEP_LIMIT_S)


def check_live(result: ProbeResult, ledgers: list[LiveLedger], when: str) -> bool:
    """Each GPU's ledger against its live instances: no problem seen at any grant or
    release, and (at rest) its residents are exactly the live instances there."""
    ok = True
    for i, ledger in enumerate(ledgers):
        for problem in ledger.problems[:3]:
            ok = result.check(False, f"cuda:{i} {when}: {problem}")
        for problem in ledger.at_rest_problems():
            ok = result.check(False, f"cuda:{i} {when}, at rest: {problem}")
    result.count("gpus_compared", len(ledgers))
    return ok


def closed_clean(result: ProbeResult, node: DeviceToolNode, live: LiveModels,
                 ledgers: list[LiveLedger]) -> bool:
    node.close()
    ok = result.check(all(ledger_idle(x) and not x.resident() for x in ledgers),
                      "after close: " + ", ".join(f"cuda:{i} {x.in_use_mb:.0f} MB"
                                                  for i, x in enumerate(ledgers)))
    left = live.live_gpu_mb()
    return ok & result.check(not left and live.released == live.loads,
                             f"after close: {live.loads} loaded, {live.released} released, "
                             f"live {left}")


# -- cross_gpu_get ------------------------------------------------------------------------------
def cross_gpu_get(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    rng = ctx.rng
    live = LiveModels()
    k = rng.choice([2, 3, 4])
    backend, ledgers = live_gpus_backend(live, [8000.0] * k)
    a, b = rng.sample(range(k), 2)
    big = live.handle("big", 3000.0)

    def helper(payload: str) -> str:
        return f"helper:{payload}@{big.get(f'cuda:{b}').device}"

    def heavy(payload: str) -> str:
        return f"heavy:{payload}@{current_device()}"

    async def aheavy(payload: str) -> str:
        return heavy(payload)

    hints = {"helper": {"vram_mb": 100}, "heavy": {"vram_mb": 7000}}
    node = DeviceToolNode([make_tool("helper", helper), make_tool("heavy", heavy, aheavy)],
                          hints=hints, backend=backend, handle_tool_errors=True,
                          scheduler=Named("gpu_now", {"helper": a, "heavy": b}))
    graph = graph_of(node)
    asynchronous = rng.random() < 0.5
    result.count("async" if asynchronous else "sync")
    ok = True
    def on_b(_: str, m: Any) -> bool:
        return str(m.content).endswith(f"@cuda:{b}")

    for cid, tool in ((f"x{ctx.index}h", "helper"), (f"x{ctx.index}k", "heavy")):
        out, why = run_step(graph, step_input([(cid, tool)]), asynchronous)
        ok &= result.check(why is None, f"{tool} step: {why}")
        ok &= check_answered(result, out, [cid], f"{tool} step", expect=on_b)
    report = node.history[-1] if node.history else None
    rec = report.record.calls[0] if report is not None and report.record else None
    ok &= result.check(rec is not None and rec.fallback is None,
                       f"the 7,000 MB call on cuda:{b}: fallback "
                       f"{None if rec is None else rec.fallback}")
    ok &= check_live(result, ledgers, f"get('cuda:{b}') from cuda:{a}")
    ok &= closed_clean(result, node, live, ledgers)
    result.case(ok)
    return result


# -- cap_beside_idle ----------------------------------------------------------------------------
def cap_beside_idle(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    asyncio.run(_cap_beside_idle(ctx, result))
    return result


async def _cap_beside_idle(ctx: ProbeContext, result: ProbeResult) -> None:
    rng = ctx.rng
    k = rng.choice([2, 3, 4])
    busy = rng.randrange(k)  # the GPU with the most free VRAM: the old rule's choice
    budgets = [24000.0 if i == busy else 8000.0 for i in range(k)]
    backend, ledgers = live_gpus_backend(LiveModels(), budgets, gpu_concurrency=1,
                                         queue_timeout_s=STEP_LIMIT_S)
    gate = RunGate()

    async def hold(payload: str) -> str:
        await gate.await_open()
        return f"hold:{payload}@{current_device()}"

    def work(payload: str) -> str:
        return f"work:{payload}@{current_device()}"

    async def awork(payload: str) -> str:
        return work(payload)

    option: DeviceOption = rng.choice(["gpu_now", "gpu_queued"])
    holder = DeviceToolNode([make_tool("hold", work, hold)], hints={"hold": {"vram_mb": 100}},
                            backend=backend, scheduler=Named("gpu_now", {"hold": busy}))
    worker = DeviceToolNode([make_tool("work", work, awork)], hints={"work": {"vram_mb": 100}},
                            backend=backend, scheduler=Named(option), handle_tool_errors=True)
    held_id = f"b{ctx.index}h"
    task = asyncio.ensure_future(graph_of(holder).ainvoke(step_input([(held_id, "hold")])))
    ok = True
    try:
        ok &= result.check(await wait_until(lambda: ledgers[busy].active == 1, 2.0),
                           f"the holding call never ran on cuda:{busy}")
        ids = [f"b{ctx.index}w{j}" for j in range(rng.randint(1, k - 1))]
        asynchronous = rng.random() < 0.5
        result.count("async" if asynchronous else "sync")
        inputs = step_input([(cid, "work") for cid in ids])
        if asynchronous:
            out, why = await within(graph_of(worker).ainvoke(inputs), STEP_LIMIT_S)
        else:
            out, why = await asyncio.to_thread(
                call_within, functools.partial(graph_of(worker).invoke, inputs), STEP_LIMIT_S)
        ok &= result.check(why is None, f"{option} step beside a full GPU: {why}")
        ok &= check_answered(result, out, ids, f"{option} step",
                             expect=lambda _, m: not str(m.content).endswith(
                                 (f"@cuda:{busy}", "@cpu")))
        records = worker.history[-1].record if worker.history else None
        bad = [(c.call_id, c.device, c.fallback) for c in (records.calls if records else ())
               if c.fallback is not None or c.device == f"cuda:{busy}"]
        ok &= result.check(not bad, f"{option} calls beside cuda:{busy} at its cap: {bad}")
    finally:
        gate.open.set()
    held, why = await within(task, STEP_LIMIT_S)
    ok &= result.check(why is None, f"the holding step: {why}")
    got = answers(held).get(held_id, [])
    ok &= result.check(len(got) == 1 and str(got[0].content).endswith(f"@cuda:{busy}"),
                       f"the holding call answered {[str(m.content) for m in got]}")
    idle = await wait_until(lambda: all(ledger_idle(x) for x in ledgers), 2.0)
    ok &= result.check(idle, "ledgers not back at 0")
    result.case(ok)


# -- evictable_only_fit -------------------------------------------------------------------------
BIG_HINTS = {"vram_mb": 14000, "weights_mb": 1000, "model": "bigm",
             "profile": {"cpu_ms": 20000, "gpu_ms": 200}}


def evictable_only_fit(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    rng = ctx.rng
    k = rng.choice([2, 3, 4])
    roomy = rng.randrange(k)
    budgets = [24000.0 if i == roomy else 8000.0 for i in range(k)]
    scheduler = rng.choice(SCHEDULERS)
    result.count(f"scheduler:{scheduler}")
    asynchronous = rng.random() < 0.5
    cid = f"e{ctx.index}"
    live = LiveModels()
    ledgers: list[LiveLedger] = []
    if ctx.backend == "simulated":
        params = {"big": ToolParams(cpu_ms=20000, gpu_ms=200, vram_mb=14000, weights_mb=1000,
                                    model="bigm"),
                  "idle17": ToolParams(cpu_ms=10, gpu_ms=10, weights_mb=17000)}
        bed = SimulatedTestbed(params, gpus=[
            GpuSpec(vram_mb=mb, resident=("idle17",) if i == roomy else ())
            for i, mb in enumerate(budgets)], cpu_cores=8, seed=ctx.seed)
        backend: Any = SimulatedBackend(bed)

        def big(payload: str) -> str:
            return f"big:{payload}@{current_device()}"
    else:
        backend, ledgers = live_gpus_backend(live, budgets)
        idle, bigm = live.handle("idle17", 17000.0), live.handle("bigm", 1000.0)

        def warm(payload: str) -> str:
            return f"warm:{payload}@{idle.get().device}"

        warmer = DeviceToolNode([make_tool("warm", warm)], backend=backend,
                                hints={"warm": idle.hints(vram_mb=0)},
                                scheduler=Named("gpu_now", {"warm": roomy}))
        graph_of(warmer).invoke(step_input([(f"{cid}w", "warm")]))

        def big(payload: str) -> str:
            return f"big:{payload}@{bigm.get().device}"

    async def abig(payload: str) -> str:
        return big(payload)

    node = DeviceToolNode([make_tool("big", big, abig)], hints={"big": BIG_HINTS},
                          backend=backend, scheduler=scheduler, handle_tool_errors=True)
    out, why = run_step(graph_of(node), step_input([(cid, "big")]), asynchronous)
    ok = result.check(why is None, f"{scheduler} step: {why}")
    ok &= check_answered(result, out, [cid], f"{scheduler} step",
                         expect=lambda _, m: str(m.content).endswith(f"@cuda:{roomy}"))
    report = node.history[-1] if node.history else None
    rec = report.record.calls[0] if report is not None and report.record else None
    ok &= result.check(
        rec is not None and rec.fallback is None and "idle17" in rec.evicted,
        f"{scheduler}: 14,000 + 1,000 MB beside an idle 17,000 MB model on cuda:{roomy}: "
        f"{None if rec is None else (rec.device, rec.fallback, rec.evicted)}")
    if ledgers:
        ok &= check_live(result, ledgers, f"{scheduler} after the eviction")
        ok &= closed_clean(result, node, live, ledgers)
    result.case(ok)
    return result
