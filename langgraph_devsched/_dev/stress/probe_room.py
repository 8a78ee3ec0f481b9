"""Scenario probes on room for resident models and on deadlines in the GPU queue.

* `close_during_call`: ``node.close()`` (from another thread) while a call runs on its
  model, and while that model still loads (sync tool, async tool, async tool loading via
  ``to_thread``): the call's instance is never released under it, the call answered; at
  rest instances == residents (locally, over the `LiveLedger`), and once the call ended
  nothing of the closed model is left; the node still serves a step; after a last close
  nothing is live.
* `kept_no_room`: an idle model that is never evicted (``keep_warm``, or weights a tool
  loads its own way) leaves no room for a ``gpu_queued`` call on another model: the call is
  refused at once and answered from the CPU with a fallback cause, a small ``gpu_queued``
  call beside it is answered too; never a queue left waiting with nothing running (the
  backend's ``queue_timeout_s`` is None: such a wait would last forever).
* `deadline_queue`: a call queued for the GPU behind a timed-out sync tool (which still
  holds its VRAM, or the ``gpu_concurrency`` slot) is answered within its deadline plus a
  slack measured by the harness (0.5 s + 10x the time it just took to run a plain step on
  the same node); the blocking thread is let go only after that, so a queue that waits for
  it is caught whatever the machine's speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolMessage

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    check_answered,
    graph_of,
    make_tool,
    reports_into,
    step_input,
)
from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels, LoadPlan
from langgraph_devsched._dev.stress.models_kit import (
    LOAD_MODES,
    RunGate,
    model_name,
    model_node,
    model_tool,
    plain_tool,
    sim_params,
)
from langgraph_devsched._dev.stress.probe_loads import close_checks, rest_checks, run_step
from langgraph_devsched.device import current_device
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.testbed import SimulatedTestbed

STEP_LIMIT_S = 5.0
STUCK_LIMIT_S = 2.0
DEADLINE_S = 0.1


def _ok_answer(cid: str, m: ToolMessage) -> bool:
    return m.status != "error"


# -- close_during_call ----------------------------------------------------------------------
def close_during_call(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    for when in ("running", "loading"):
        result.case(_close_during(ctx, result, when))
    return result


def _close_during(ctx: ProbeContext, result: ProbeResult, when: str) -> bool:
    """``close()`` while the call runs on its model, or while that model still loads."""
    rng = ctx.rng
    mode = rng.choice(LOAD_MODES)
    use_async = mode != "sync" or rng.random() < 0.5
    result.count(f"{when}:{mode}:{'async' if use_async else 'sync'}")
    models = LiveModels()
    gate = RunGate()
    load_gate = threading.Event()
    problems: list[str] = []
    held = models.handle(model_name(ctx, "held"), 3500.0)
    if when == "loading":
        models.plans[held.name] = LoadPlan(gate=load_gate)
    hints: dict[str, dict[str, Any]] = {"t_held": held.hints(vram_mb=500.0, pinned="gpu_now")}
    tools = [model_tool("t_held", held, models, mode, gate=gate if when == "running" else None,
                        problems=problems)]
    node, ledger = model_node(ctx, models, tools, hints, sim_params=sim_params(hints))
    graph = graph_of(node)
    what = f"close() while the call's model is {when} ({mode} tool)"
    cid = f"cd{ctx.index}{when[0]}"
    box: dict[str, Any] = {}

    def step() -> None:
        box["out"] = run_step(graph, step_input([(cid, "t_held")]), use_async)

    runner = threading.Thread(target=step, daemon=True, name="devsched-stress-close-step")
    runner.start()
    entered = gate.entered if when == "running" else models.load_started
    ok = result.check(entered.wait(2.0), f"{what}: the call never started")
    closer = threading.Thread(target=node.close, daemon=True, name="devsched-stress-close")
    closer.start()
    closer.join(0.1)  # close() may wait for the running call: it ends once the gate opens
    gate.open.set()
    load_gate.set()
    runner.join(STEP_LIMIT_S + 1.0)
    closer.join(STEP_LIMIT_S)
    ok &= result.check(not closer.is_alive(), f"{what}: close() did not return once the call "
                       "ended")
    out, why = box.get("out", (None, "the step never returned"))
    ok &= result.check(why is None, f"{what}: {why}")
    if why is None:
        ok &= check_answered(result, out, [cid], what, expect=_ok_answer)
    for problem in problems:
        ok &= result.check(False, problem)
    ok &= rest_checks(result, models, ledger, what)
    if ledger is not None:  # close() frees a model in use once its call ends (or excludes it
        left = models.live_gpu_mb()  # until then): nothing of it once that call ended
        ok &= result.check(not left and not ledger.resident(),
                           f"{what}: after the call ended, {sorted(left)} still live, "
                           f"{[w.model for w in ledger.resident()]} resident")
    again = f"cd{ctx.index}{when[0]}r"
    out, why = run_step(graph, step_input([(again, "t_held")]), use_async)
    ok &= result.check(why is None, f"{what}: a step after close(): {why}") and check_answered(
        result, out, [again], f"{what}: a step after close()", expect=_ok_answer)
    ok &= rest_checks(result, models, ledger, f"{what}: a step after close()")
    return ok & close_checks(result, node, models, ledger, what)


# -- kept_no_room ---------------------------------------------------------------------------
def kept_no_room(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    variant = ctx.rng.choice(["keep_warm", "own_way"])
    use_async = ctx.rng.random() < 0.5
    result.count(f"{variant}:{'async' if use_async else 'sync'}:{ctx.backend}")
    if ctx.backend == "simulated":
        ok = _kept_no_room_simulated(ctx, result, use_async)
    else:
        ok = _kept_no_room_local(ctx, result, variant, use_async)
    result.case(ok)
    return result


def _queued_step_checks(result: ProbeResult, out: Any, ids: tuple[str, str],
                        reports: list[StepReport], what: str) -> bool:
    q, s = ids
    ok = check_answered(result, out, [q, s], what, expect=_ok_answer)
    recs = [r for rep in reports if rep.record is not None for r in rep.record.calls
            if r.call_id == q]
    ok &= result.check(bool(recs), f"{what}: the queued call was never recorded")
    for rec in recs:
        ok &= result.check(rec.device == "cpu" and rec.fallback is not None,
                           f"{what}: the queued call that never fits ran on {rec.device} "
                           f"(fallback {rec.fallback})")
    return ok


def _kept_no_room_local(ctx: ProbeContext, result: ProbeResult, variant: str,
                        use_async: bool) -> bool:
    models = LiveModels()
    kept = models.handle("kept", 5000.0, keep_warm=variant == "keep_warm")
    wanted = models.handle("wanted", 3000.0)
    own: list[Any] = []

    def own_way(payload: str) -> str:  # declares its model, loads it without the handle
        if not own:
            own.append(models.own_instance("kept", current_device(), 5000.0))
        return f"t_kept:{payload}@{current_device()}"

    kept_tool = (model_tool("t_kept", kept, models, "sync") if variant == "keep_warm"
                 else make_tool("t_kept", own_way))
    hints: dict[str, dict[str, Any]] = {
        "t_kept": kept.hints(vram_mb=500.0, pinned="gpu_now"),
        "t_wanted": wanted.hints(vram_mb=500.0, pinned="gpu_queued"),
        "small": {"vram_mb": 500.0, "pinned": "gpu_queued"},
    }
    reports: list[StepReport] = []
    tools = [kept_tool, model_tool("t_wanted", wanted, models, "sync"), plain_tool("small")]
    node, ledger = model_node(ctx, models, tools, hints, on_step=reports_into(reports))
    assert ledger is not None
    graph = graph_of(node)
    what = f"kept_no_room ({variant})"
    first = f"kn{ctx.index}k"
    out, why = run_step(graph, step_input([(first, "t_kept")]), use_async)
    ok = result.check(why is None, f"{what}: loading the kept model: {why}") and check_answered(
        result, out, [first], f"{what}: loading the kept model", expect=_ok_answer)
    ok &= rest_checks(result, models, ledger, f"{what}, the kept model loaded")
    ids = (f"kn{ctx.index}q", f"kn{ctx.index}s")

    def unstick() -> None:  # free the kept model (and the tool's own instance of it)
        for inst in own:
            models.release_own(inst)
        own.clear()
        node.close()

    out, why = _bounded_unless_stuck(graph, step_input([(ids[0], "t_wanted"),
                                                        (ids[1], "small")]),
                                     use_async, ledger, unstick)
    ok &= result.check(why is None, f"{what}: {why}")
    if why is None:
        ok &= _queued_step_checks(result, out, ids, reports, what)
    ok &= rest_checks(result, models, ledger, f"{what}, after the queued call")
    for inst in own:
        models.release_own(inst)
    node.close()
    ok &= result.check(ledger.in_use_mb <= 1e-6 and ledger.queued == 0,
                       f"{what}, after close: {ledger.in_use_mb:.0f} MB, {ledger.queued} queued")
    return ok


def _bounded_unless_stuck(graph: Any, inputs: dict[str, Any], use_async: bool,
                          ledger: LiveLedger, unstick: Callable[[], None],
                          ) -> tuple[Any, str | None]:
    """Run a step; a GPU queue that waits while nothing runs (so nothing can ever make room)
    is reported as stuck, and ``unstick`` (free the kept model) lets the waiters go."""
    box: dict[str, Any] = {}

    def step() -> None:
        box["out"] = run_step(graph, inputs, use_async, STEP_LIMIT_S)

    runner = threading.Thread(target=step, daemon=True, name="devsched-stress-kept-step")
    runner.start()
    end = time.monotonic() + STUCK_LIMIT_S
    stuck_since: float | None = None
    while runner.is_alive() and time.monotonic() < end:
        runner.join(0.01)
        idle_queue = ledger.queued > 0 and ledger.active == 0
        if not idle_queue:
            stuck_since = None
        elif stuck_since is None:
            stuck_since = time.monotonic()
        elif time.monotonic() - stuck_since >= 0.1:
            unstick()
            runner.join(STEP_LIMIT_S)
            return None, ("a gpu_queued call that can never fit beside the kept model was "
                          "left waiting in the GPU queue (nothing running, nothing to free)")
    runner.join(STEP_LIMIT_S)
    if "out" not in box:
        unstick()
        return None, f"the step did not finish within {STUCK_LIMIT_S:g} s"
    out: tuple[Any, str | None] = box["out"]
    return out


def _kept_no_room_simulated(ctx: ProbeContext, result: ProbeResult, use_async: bool) -> bool:
    hints: dict[str, dict[str, Any]] = {
        "t_kept": {"model": "kept", "weights_mb": 5000.0, "keep_warm": True, "vram_mb": 500.0,
                   "pinned": "gpu_now"},
        "t_wanted": {"model": "wanted", "weights_mb": 3000.0, "vram_mb": 500.0,
                     "pinned": "gpu_queued"},
        "small": {"vram_mb": 500.0, "pinned": "gpu_queued"},
    }
    bed = SimulatedTestbed(sim_params(hints), vram_budget_mb=8000.0, cpu_cores=8, seed=ctx.seed,
                           resident={"gpu": ["kept"]}, keep_warm=["kept"])
    reports: list[StepReport] = []
    node = DeviceToolNode([plain_tool(t) for t in hints], hints=hints, testbed=bed,
                          scheduler="static", handle_tool_errors=True,
                          on_step=reports_into(reports))
    graph = graph_of(node)
    ids = (f"kn{ctx.index}q", f"kn{ctx.index}s")
    out, why = run_step(graph, step_input([(ids[0], "t_wanted"), (ids[1], "small")]), use_async)
    ok = result.check(why is None, f"kept_no_room (simulated): {why}")
    if why is None:
        ok &= _queued_step_checks(result, out, ids, reports, "kept_no_room (simulated)")
    return ok


# -- deadline_queue -------------------------------------------------------------------------
def deadline_queue(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    variant = ctx.rng.choice(["vram", "cap"])
    use_async = ctx.rng.random() < 0.5
    result.count(f"{variant}:{'async' if use_async else 'sync'}:{ctx.backend}")
    release = threading.Event()

    def holder(payload: str) -> str:  # sync only: its thread runs on past the deadline
        release.wait(STEP_LIMIT_S)
        return f"holder:{payload}@{current_device()}"

    vram = 5000.0 if variant == "vram" else 100.0
    hints: dict[str, dict[str, Any]] = {
        "holder": {"vram_mb": vram, "pinned": "gpu_now", "cpu_allowed": False},
        "queued": {"vram_mb": vram, "pinned": "gpu_queued"},
        "quick": {"gpu_capable": False},
    }
    tools = [make_tool("holder", holder), plain_tool("queued"), plain_tool("quick")]
    models = LiveModels()
    node, ledger = model_node(ctx, models, tools, hints, call_timeout_s=DEADLINE_S,
                              gpu_concurrency=1 if variant == "cap" else None)
    graph = graph_of(node)
    ref = f"dq{ctx.index}r"
    t0 = time.perf_counter()
    out, why = run_step(graph, step_input([(ref, "quick")]), use_async)
    ref_s = time.perf_counter() - t0
    slack = 0.5 + 10.0 * ref_s
    ok = result.check(why is None, f"the reference step: {why}")
    timer: threading.Timer | None = None
    try:
        hid = f"dq{ctx.index}h"
        out, why = run_step(graph, step_input([(hid, "holder")]), use_async)
        ok &= result.check(why is None, f"the timed-out sync tool's step: {why}")
        if why is None:
            ok &= check_answered(result, out, [hid], "the timed-out sync tool",
                                 expect=lambda c, m: m.status == "error"
                                 and "timed out" in str(m.content))
        qid = f"dq{ctx.index}q"
        # the holder's thread is let go 0.3 s after the queued call's deadline + slack at the
        # earliest: a queued call that waits for it is late by that much whatever the speed
        timer = threading.Timer(DEADLINE_S + slack + 0.3, release.set)
        timer.daemon = True
        t1 = time.perf_counter()
        timer.start()
        out, why = run_step(graph, step_input([(qid, "queued")]), use_async)
        took = time.perf_counter() - t1
        ok &= result.check(why is None, f"the queued call's step: {why}")
        if why is None:
            ok &= check_answered(result, out, [qid], "the call queued behind it",
                                 expect=lambda c, m: m.status != "error"
                                 or "timed out" in str(m.content))
        result.count("late" if took > DEADLINE_S + slack else "in_time")
        ok &= result.check(
            took <= DEADLINE_S + slack,
            f"{variant}: the call queued behind a timed-out sync tool was answered after "
            f"{took:.2f} s (deadline {DEADLINE_S:g} s + slack {slack:.2f} s)")
    finally:
        release.set()
        if timer is not None:
            timer.cancel()
    ok &= rest_checks(result, models, ledger, f"deadline_queue ({variant})")
    result.case(ok)
    return result

