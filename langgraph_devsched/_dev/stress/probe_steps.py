"""Scenario probes on how steps are keyed and run: loops, reused ids, concurrency, timeouts.

* `cross_loop`: the same step (same ``thread_id`` and call ids) run at once from several
  threads, each with its own event loop (``asyncio.run(graph.ainvoke(...))``): every
  invocation answers every call.
* `reused_ids`: concurrent steps reusing call ids for different tools with different hints
  (a CPU-forbidden pinned GPU tool, a CPU-only tool, a ``gpu_queued``-pinned one): each call
  runs on an option its own hints allow (the device its tool saw, its `CallRecord`).
* `max_concurrency`: a step run with ``config={"max_concurrency": k}`` never runs more than
  ``k`` of its calls at once.
* `timeout`: per-call timeouts (``DeviceToolNode(call_timeout_s=...)`` or the hint
  ``timeout_s``): at the deadline an error ToolMessage ("timed out"), the `CallRecord`'s
  error starts with "timeout", and a sync GPU tool's VRAM stays reserved until its thread
  returns (true VRAM, counted by the tools themselves, never over the budget).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from typing import Any

from langchain_core.messages import ToolMessage

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
from langgraph_devsched.device import current_device
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.classic.static import StaticHintScheduler

STEP_LIMIT_S = 5.0
HOLD_LIMIT_S = 5.0
CROSS_LIMIT_S = 1.0
"""A cross-loop run takes about 30 ms; one still running after this is stuck."""


def _sleeper(name: str, seconds: float, gauge: Gauge | None = None) -> Any:
    def run(payload: str) -> str:
        if gauge is None:
            time.sleep(seconds)
        else:
            with gauge.held():
                time.sleep(seconds)
        return f"{name}:{payload}@{current_device()}"

    async def arun(payload: str) -> str:
        if gauge is None:
            await asyncio.sleep(seconds)
        else:
            with gauge.held():
                await asyncio.sleep(seconds)
        return f"{name}:{payload}@{current_device()}"

    return make_tool(name, run, arun)


# -- cross_loop -----------------------------------------------------------------------------
class SlowScheduler(StaticHintScheduler):
    """The static hints after a 10 ms think, in a worker thread (``blocking``): the step's
    planning lock is held across an ``await`` while the other loops arrive."""

    name = "slow-static"
    blocking = True

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        time.sleep(0.01)
        return super().decide(batch, view)


def cross_loop(ctx: ProbeContext, *, loops: int = 3) -> ProbeResult:
    result = ProbeResult()
    hints: dict[str, dict[str, Any]] = {
        "xa": {"vram_mb": 500, "gpu_share": 0.5}, "xb": {"vram_mb": 200, "preferred": "cpu"},
    }
    node, ledger = node_for(
        ctx, [_sleeper("xa", 0.01), _sleeper("xb", 0.01)], hints, scheduler=SlowScheduler()
    )
    graph = graph_of(node)
    ids = [f"x{ctx.index}c{j}" for j in range(3)]
    inputs = step_input([(ids[0], "xa"), (ids[1], "xb"), (ids[2], "xa")])
    config = {"configurable": {"thread_id": f"t{ctx.index}"}}
    outs: list[tuple[Any, str | None]] = [(None, "never ran")] * loops
    start = threading.Barrier(loops, timeout=5.0)

    def one(i: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait()
        outs[i] = asyncio.run(within(graph.ainvoke(inputs, config), CROSS_LIMIT_S))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(loops)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CROSS_LIMIT_S + 5.0)
    hung = result.check(not any(t.is_alive() for t in threads), "an event loop's run hung")
    idle = asyncio.run(wait_until(lambda: ledger_idle(ledger), 2.0))
    idle = result.check(idle, "local ledger not back at 0 after the runs")
    for i, (out, why) in enumerate(outs):  # each loop's run is one injection
        ok = result.check(why is None, f"loop {i} of {loops}: ainvoke {why}")
        if why is None:
            ok &= check_answered(
                result, out, ids, f"loop {i}",
                expect=lambda cid, m: str(m.content).startswith(
                    ("xb:" if cid == ids[1] else "xa:") + cid
                ),
            )
        result.case(ok and hung and idle)
    return result


# -- reused_ids ------------------------------------------------------------------------------
REUSED_HINTS: dict[str, dict[str, Any]] = {
    "gpu_pinned": {"vram_mb": 500, "gpu_share": 0.2, "pinned": "gpu_now", "cpu_allowed": False},
    "cpu_only": {"gpu_capable": False},
    "queued_pin": {"vram_mb": 500, "gpu_share": 0.2, "pinned": "gpu_queued"},
}
REUSED_STEPS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("r0", "gpu_pinned"), ("r1", "queued_pin")),
    (("r0", "cpu_only"), ("r1", "cpu_only")),
    (("r0", "queued_pin"), ("r1", "gpu_pinned")),
)
"""Three steps, the same two call ids, different tools (and hints) behind them."""


def reused_ids(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    mode = ctx.rng.choice(("threads", "threads_same_thread_id", "one_loop", "one_loop_same_thread"))
    result.count(f"mode:{mode}")
    seen: list[tuple[str, str, str]] = []
    lock = threading.Lock()
    parties = sum(len(s) for s in REUSED_STEPS)
    arrived = [0]

    def overlap() -> None:
        with lock:
            arrived[0] += 1

    def tool(name: str) -> Any:
        def run(payload: str) -> str:
            overlap()
            end = time.monotonic() + 0.5
            while arrived[0] < parties and time.monotonic() < end:
                time.sleep(0.002)
            with lock:
                seen.append((name, payload, current_device()))
            return f"{name}:{payload}@{current_device()}"

        async def arun(payload: str) -> str:
            overlap()
            end = time.monotonic() + 0.5
            while arrived[0] < parties and time.monotonic() < end:
                await asyncio.sleep(0.002)
            with lock:
                seen.append((name, payload, current_device()))
            return f"{name}:{payload}@{current_device()}"

        return make_tool(name, run, arun)

    reports: list[StepReport] = []
    node, ledger = node_for(
        ctx, [tool(n) for n in REUSED_HINTS], REUSED_HINTS, on_step=reports_into(reports),
        queue_timeout_s=2.0,
    )
    graph = graph_of(node)
    same = mode.endswith(("same_thread_id", "same_thread"))
    config: dict[str, Any] = {"configurable": {"thread_id": "shared"}} if same else {}
    inputs = [
        step_input(list(calls), {cid: f"k{k}:{cid}" for cid, _ in calls})
        for k, calls in enumerate(REUSED_STEPS)
    ]
    if mode.startswith("threads"):
        outs = _in_threads(graph, inputs, config)
    else:
        async def gather() -> list[tuple[Any, str | None]]:
            return list(await asyncio.gather(
                *(within(graph.ainvoke(i, config), STEP_LIMIT_S) for i in inputs)
            ))

        outs = asyncio.run(gather())
    ok = True
    for k, (calls, (out, why)) in enumerate(zip(REUSED_STEPS, outs, strict=True)):
        ok &= result.check(why is None, f"step {k}: {why}")
        if why is None:
            tools = dict(calls)

            def own(cid: str, m: ToolMessage, tools: dict[str, str] = tools, k: int = k) -> bool:
                return str(m.content).startswith(f"{tools[cid]}:k{k}:{cid}@")

            ok &= check_answered(result, out, [c for c, _ in calls], f"step {k}", expect=own)
    for name, payload, device in seen:  # the device: GPU only if GPU-capable, CPU only if allowed
        spec = ToolDeviceSpec(**REUSED_HINTS[name])
        ok &= result.check(
            spec.cpu_allowed if device == "cpu" else spec.gpu_capable,
            f"tool {name} ({payload}) ran on {device}; its hints allow "
            f"{', '.join(spec.allowed_options())}"
            + ("" if spec.cpu_allowed else " (never the CPU)"),
        )
    ok &= result.check(len(seen) == parties, f"{len(seen)} tool runs for {parties} calls")
    specs = {n: ToolDeviceSpec(**h) for n, h in REUSED_HINTS.items()}
    for report in reports:
        for rec in report.record.calls if report.record is not None else ():
            allowed = specs[rec.tool].allowed_options() if rec.tool in specs else ()
            ok &= result.check(
                rec.option in allowed,
                f"CallRecord {rec.call_id} ({rec.tool}) has option {rec.option}; allowed: "
                f"{', '.join(allowed)}",
            )
    ok &= result.check(
        len(reports) == len(REUSED_STEPS), f"{len(reports)} step reports for 3 steps"
    )
    idle = asyncio.run(wait_until(lambda: ledger_idle(ledger), 2.0))
    ok &= result.check(idle, "local ledger not back at 0 after the steps")
    result.case(ok)
    return result


def _in_threads(
    graph: Any, inputs: list[dict[str, Any]], config: dict[str, Any]
) -> list[tuple[Any, str | None]]:
    outs: list[tuple[Any, str | None]] = [(None, "never ran")] * len(inputs)

    def one(k: int) -> None:
        outs[k] = call_within(lambda: graph.invoke(inputs[k], config), STEP_LIMIT_S)

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STEP_LIMIT_S + 2.0)
    return outs


# -- max_concurrency -------------------------------------------------------------------------
def max_concurrency(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    gauge = Gauge()
    k = ctx.rng.choice((1, 2, 3))
    run_async = ctx.rng.random() < 0.5
    hints: dict[str, dict[str, Any]] = {
        "mc": {"vram_mb": 100, "gpu_share": 0.2}, "mcc": {"gpu_capable": False},
    }
    node, _ = node_for(ctx, [_sleeper("mc", 0.01, gauge), _sleeper("mcc", 0.01, gauge)], hints)
    graph = graph_of(node)
    ids = [f"m{ctx.index}c{j}" for j in range(k + 3)]
    inputs = step_input([(cid, ctx.rng.choice(("mc", "mcc"))) for cid in ids])
    config = {"max_concurrency": k}
    if run_async:
        out, why = asyncio.run(within(graph.ainvoke(inputs, config), STEP_LIMIT_S))
    else:
        out, why = call_within(lambda: graph.invoke(inputs, config), STEP_LIMIT_S)
    mode = "async" if run_async else "sync"
    result.count(f"{mode}")
    ok = result.check(why is None, f"{mode} step: {why}")
    if why is None:
        ok &= check_answered(result, out, ids, f"{mode} step")
    ok &= result.check(
        gauge.max_count <= k,
        f"{mode} step with max_concurrency={k} ran {gauge.max_count} of its {len(ids)} calls "
        "at once",
    )
    result.case(ok)
    return result


# -- timeout ---------------------------------------------------------------------------------
def timeout_features() -> tuple[bool, bool]:
    """(the node takes ``call_timeout_s``, the hints take ``timeout_s``)."""
    node = "call_timeout_s" in inspect.signature(DeviceToolNode.__init__).parameters
    hint = "timeout_s" in ToolDeviceSpec.model_fields
    return node, hint


def timeout(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    node_has, hint_has = timeout_features()
    if not (node_has or hint_has):
        result.check(False, "per-call timeouts not available: DeviceToolNode has no "
                     "call_timeout_s and ToolDeviceSpec no timeout_s")
        result.case(False)
        return result
    via = ctx.rng.choice([v for v, has in (("node", node_has), ("hint", hint_has)) if has])
    run_async = ctx.rng.random() < 0.5
    mode = "async" if run_async else "sync"
    result.count(f"{via}:{mode}:{ctx.backend}")
    deadline = 0.2  # the quick call beside the hang must finish well within it, even loaded
    budget = 1000.0
    vram = Gauge()
    release = threading.Event()
    entered = threading.Event()

    def slow(payload: str) -> str:  # sync only: under ainvoke it runs in a worker thread
        on_gpu = current_device() != "cpu"
        entered.set()
        with vram.held(600.0 if on_gpu else 0.0):
            release.wait(HOLD_LIMIT_S)
        return f"slowgpu:{payload}"

    def grab_run(payload: str) -> str:
        device = current_device()
        with vram.held(600.0 if device != "cpu" else 0.0):
            time.sleep(0.01)
        return f"grab:{payload}@{device}"

    async def grab_arun(payload: str) -> str:
        return await asyncio.to_thread(grab_run, payload)

    hints: dict[str, dict[str, Any]] = {
        "slowgpu": {"vram_mb": 600, "pinned": "gpu_now", "cpu_allowed": False},
        "quick": {"gpu_capable": False},
        "grab": {"vram_mb": 600, "preferred": "gpu_now"},
    }
    kwargs: dict[str, Any] = {}
    if via == "hint":
        hints["slowgpu"]["timeout_s"] = deadline
    else:
        kwargs["call_timeout_s"] = deadline
    reports: list[StepReport] = []
    tools = [
        make_tool("slowgpu", slow), _sleeper("quick", 0.0), make_tool("grab", grab_run, grab_arun)
    ]
    node, ledger = node_for(
        ctx, tools, hints, budget_mb=budget, scheduler="static",
        on_step=reports_into(reports), **kwargs,
    )
    graph = graph_of(node)
    ids = [f"to{ctx.index}a", f"to{ctx.index}b"]
    inputs = step_input([(ids[0], "slowgpu"), (ids[1], "quick")])
    t0 = time.perf_counter()
    if run_async:
        out, why = asyncio.run(within(graph.ainvoke(inputs), STEP_LIMIT_S))
    else:
        out, why = call_within(lambda: graph.invoke(inputs), STEP_LIMIT_S)
    elapsed = time.perf_counter() - t0
    ok = result.check(why is None, f"{mode} step with a hanging call: {why}")

    def timed_out(cid: str, m: ToolMessage) -> bool:
        if cid == ids[0]:
            return m.status == "error" and "timed out" in str(m.content)
        return m.status != "error"

    if why is None:
        ok &= check_answered(result, out, ids, f"{mode} step", expect=timed_out)
        ok &= result.check(
            elapsed <= deadline + 2.0, f"answered after {elapsed:.2f} s ({deadline} s deadline)"
        )
    if ledger is not None and entered.is_set() and not release.is_set():
        in_use = ledger.in_use_mb
        ok &= result.check(
            vram.count == 0 or in_use >= 600.0 - 1e-6,
            f"the ledger holds {in_use:.0f} MB while the timed-out sync tool still runs with "
            "its 600 MB (released at the deadline, not when its thread returned)",
        )
        gid = f"to{ctx.index}g"
        g0 = time.perf_counter()
        _, g_why = call_within(lambda: graph.invoke(step_input([(gid, "grab")])), STEP_LIMIT_S)
        g_took = time.perf_counter() - g0
        ok &= result.check(g_why is None, f"second step: {g_why}")
        ok &= result.check(
            g_why is not None or g_took <= 2.0,
            f"a step after the timed-out call took {g_took:.2f} s (it waited for that thread?)",
        )
        ok &= result.check(
            vram.peak <= budget + 1e-6,
            f"tools held {vram.peak:.0f} MB of VRAM at once, over the {budget:.0f} MB budget",
        )
    release.set()
    done = asyncio.run(wait_until(lambda: vram.count == 0 and ledger_idle(ledger), 3.0))
    ok &= result.check(done, "ledger not back at 0 after the timed-out thread returned")
    asyncio.run(wait_until(lambda: any(ids[0] in r.batch.call_ids for r in reports), 2.0))
    recs = [
        rec for r in reports if r.record is not None for rec in r.record.calls
        if rec.call_id == ids[0]
    ]
    ok &= result.check(bool(recs), "the timed-out call's step was never reported")
    for rec in recs:
        ok &= result.check(
            (rec.error or "").startswith("timeout"),
            f"the timed-out call's CallRecord error is {rec.error!r}",
        )
    result.case(ok)
    return result
