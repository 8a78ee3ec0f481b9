"""Scenario probes on idle-time calibration and on call ids the model makes up.

* `cut_calibration` (both): ``idle_calibration=True``; after an async step the node re-runs
  its SYNC tool on the side it never measured, and the run blocks; the next step arrives and
  cuts it. Locally, while the cut run's thread still runs, what it holds stays held: its
  6,000 MB on the 8,000 MB GPU (the next GPU call is refused: CPU, ``oom``) and the tools
  never really hold more than the budget, or its CPU slot (``cpu_workers=1``); everything
  back at 0 once the thread returns. Both backends: the next step answered once per call.
* `hostile_ids` (both): one step whose call ids look like a hedge's second run
  (``x~hedge``, ``x~hedge~2``), with Unicode, separators, spaces or 200 characters, while
  ``x`` is hedged: one answer per id carrying its own output, one record entry per id, each
  call on the device it was decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from langgraph_devsched._dev.stress.kit import (
    Gauge,
    ProbeContext,
    ProbeResult,
    check_answered,
    graph_of,
    ledger_idle,
    make_tool,
    node_for,
    step_input,
    wait_until,
    within,
)
from langgraph_devsched._dev.stress.probe_gpus import run_step
from langgraph_devsched.device import current_device
from langgraph_devsched.hedging import hedge_outcomes
from langgraph_devsched.node import DeviceToolNode
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

STEP_LIMIT_S = 10.0
HOLD_LIMIT_S = 5.0
BUDGET_MB = 8000.0
EMBED_MB = 6000.0


class CalibrateOnce(SchedulerBase):
    """Each step's calls on ``step``; after the first step, one idle run on ``idle``."""

    name = "calibrate_once"

    def __init__(self, step: DeviceOption, idle: DeviceOption) -> None:
        self.step, self.idle = step, idle
        self.first: Batch | None = None
        self.asked = False

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision(dict.fromkeys(batch.call_ids, self.step), "fixed")

    def observe(self, batch: Batch, decision: Decision, record: Any) -> None:
        if self.first is None and batch.calls:
            c = batch.calls[0]
            self.first = Batch.of([(c.call_id, c.tool, c.spec)])

    def calibration(self) -> tuple[Batch, Decision] | None:
        if self.first is None or self.asked:
            return None
        self.asked = True
        return self.first, Decision({self.first.call_ids[0]: self.idle}, "idle run")


# -- cut_calibration ----------------------------------------------------------------------------
def cut_calibration(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    asyncio.run(_cut_calibration(ctx, result))
    return result


async def _cut_calibration(ctx: ProbeContext, result: ProbeResult) -> None:
    on_gpu = ctx.rng.random() < 0.5  # the side the cut idle run holds
    result.count("idle_on_gpu" if on_gpu else "idle_on_cpu")
    entered, gate = threading.Event(), threading.Event()
    vram, cpu = Gauge(), Gauge()
    lock = threading.Lock()
    runs: dict[str, int] = {}

    def embed(payload: str) -> str:  # sync only: its idle re-run runs in a thread
        device = current_device()
        with lock:
            runs[payload] = runs.get(payload, 0) + 1
            idle_run = runs[payload] == 2
        on_cpu = cpu.held() if device == "cpu" else contextlib.nullcontext()
        with vram.held(EMBED_MB if device != "cpu" else 0.0), on_cpu:
            if idle_run:
                entered.set()
                gate.wait(HOLD_LIMIT_S)
        return f"embed:{payload}@{device}"

    # the step runs on the other side than the idle run; the next step asks for the GPU
    scheduler = CalibrateOnce("cpu" if on_gpu else "gpu_now", "gpu_now" if on_gpu else "cpu")
    node, ledger = node_for(ctx, [make_tool("embed", embed)],
                            {"embed": {"vram_mb": EMBED_MB, "idempotent": True}},
                            budget_mb=BUDGET_MB, cpu_workers=1, scheduler=scheduler,
                            idle_calibration=True, handle_tool_errors=True)
    graph = graph_of(node)
    first, second = f"k{ctx.index}a", f"k{ctx.index}b"
    ok = True
    try:
        out, why = await within(graph.ainvoke(step_input([(first, "embed")])), STEP_LIMIT_S)
        ok &= result.check(why is None and check_answered(result, out, [first], "first step"),
                           f"first step: {why}")
        started = await wait_until(entered.is_set, 2.0)
        ok &= result.check(started, "the idle run never started")
        scheduler.step = "gpu_now"
        out, why = await within(graph.ainvoke(step_input([(second, "embed")])), STEP_LIMIT_S)
        ok &= result.check(why is None, f"the step that cut the idle run: {why}")
        ok &= check_answered(result, out, [second], "the step that cut the idle run")
        if ledger is not None and started:
            ok &= _held_while_running(result, node, ledger, on_gpu, vram)
        ok &= result.check(vram.peak <= BUDGET_MB + 1e-6 or ledger is None,
                           f"tools really held {vram.peak:.0f} MB on a {BUDGET_MB:.0f} MB GPU")
        ok &= result.check(cpu.max_count <= 1 or ledger is None,
                           f"{cpu.max_count} CPU runs at once with cpu_workers=1")
    finally:
        gate.set()
    slots = getattr(node.backend, "cpu_slots", None)
    idle = await wait_until(lambda: ledger_idle(ledger) and ledger_idle(slots), 3.0)
    ok &= result.check(idle, "ledger or CPU slots not back at 0 once the cut run returned")
    result.case(ok)


def _held_while_running(result: ProbeResult, node: DeviceToolNode, ledger: Any, on_gpu: bool,
                        vram: Gauge) -> bool:
    """While the cut run's thread still runs (its gate closed), what it holds is held."""
    if on_gpu:
        rec = node.history[-1].record.calls[0] if node.history and node.history[
            -1].record else None
        ok = result.check(ledger.in_use_mb >= EMBED_MB - 1e-6,
                          f"cut idle run on the GPU: the ledger holds {ledger.in_use_mb:.0f} MB "
                          "while its thread still runs")
        return ok & result.check(
            rec is not None and (rec.device, rec.fallback) == ("cpu", "oom"),
            f"the next GPU call beside the cut run: "
            f"{None if rec is None else (rec.device, rec.fallback)}")
    slots = node.backend.cpu_slots  # type: ignore[attr-defined]
    return result.check(slots is not None and slots.in_use_mb == 1,
                        "cut idle run on the CPU: its CPU slot was given back while its "
                        "thread still runs")


# -- hostile_ids --------------------------------------------------------------------------------
HOSTILE = ("x~hedge", "x~hedge~2", "x~hedge~3", "\u0438\u0434\u00b2", "a|b,c=d", " spaced id ",
           "z" * 200, "#0", "x~HEDGE")


class HedgeFirst(SchedulerBase):
    """Every call ``gpu_now``; the first one hedged on the CPU."""

    name = "hedge_first"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        first = batch.call_ids[0]
        return self._decision(dict.fromkeys(batch.call_ids, "gpu_now"), "gpu, first hedged",
                              hedges={first: "cpu"}, hedge_bound=1.5)


def hostile_ids(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    rng = ctx.rng
    ids = ["x", *rng.sample(HOSTILE, rng.randint(1, 4))]
    if "x~hedge" not in ids:
        ids.insert(rng.randint(1, len(ids)), "x~hedge")

    def echo(payload: str) -> str:
        return f"echo:{payload}@{current_device()}"

    async def aecho(payload: str) -> str:
        return echo(payload)

    node, ledger = node_for(ctx, [make_tool("echo", echo, aecho)],
                            {"echo": {"vram_mb": 100, "idempotent": True}},
                            scheduler=HedgeFirst(), handle_tool_errors=True)
    asynchronous = rng.random() < 0.5
    result.count("async" if asynchronous else "sync")
    out, why = run_step(graph_of(node), step_input([(cid, "echo") for cid in ids]), asynchronous)
    ok = result.check(why is None, f"step: {why}")
    ok &= check_answered(result, out, ids, "hostile ids",
                         expect=lambda cid, m: str(m.content).startswith(f"echo:{cid}@")
                         and (cid == "x" or str(m.content).endswith("@cuda:0")))
    record = node.history[-1].record if node.history else None
    got = [c.call_id for c in record.calls] if record is not None else []
    ok &= result.check(got == ids, f"record entries {got[:6]} for ids {ids[:6]}")
    wrong = [(c.call_id, c.device) for c in (record.calls if record else ())
             if c.call_id != "x" and (c.option, c.device) != ("gpu_now", "cuda:0")]
    ok &= result.check(not wrong, f"calls not run as decided (gpu_now on cuda:0): {wrong}")
    hedged = [h.call_id for h in hedge_outcomes(record)] if record is not None else []
    ok &= result.check(hedged == ["x"], f"hedge outcomes {hedged}: only x is hedged")
    idle = asyncio.run(wait_until(lambda: ledger_idle(ledger), 2.0))
    ok &= result.check(idle, "ledger not back at 0")
    result.case(ok)
    return result
