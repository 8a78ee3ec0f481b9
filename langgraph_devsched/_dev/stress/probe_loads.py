"""Scenario probes on model loads that fail, outlast the deadline, or are cancelled.

Locally each runs over a `LiveLedger` (`stress/live.py`): at every grant and release the
ledger counts every instance the harness's loaders hold (loading or live) and what they
really hold stays within the budget; at rest the live instances are the ledger's residents.

* `loader_error`: the loads of a model the hints name and of one they do not name raise:
  each call answered with the load's error; then nothing resident (no phantom weights) and a
  6,000 MB `gpu_now` call placed on the emptied 8,000 MB GPU.
* `slow_load`: a load that outlasts the call's deadline (``call_timeout_s``), from a sync
  tool or an async tool loading via ``asyncio.to_thread(handle.get)``: answered "timed out"
  at the deadline; the weights counted while the load runs on; a 6,000 MB model asked for
  meanwhile never pushes the instances over the budget; once the load ends, instances ==
  residents.
* `cancel_load`: ``ainvoke`` cancelled during a load (a sync tool, an async tool loading
  inline, one loading via ``to_thread``): the same checks once the load ends.

On the simulated backend (its tools load into the process-wide cache; the testbed's
residency is virtual) each checks what that backend answers: one answer per call, the
expected error or "timed out", the follow-up step answered.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolMessage

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    call_within,
    check_answered,
    graph_of,
    step_input,
    wait_until,
    within,
)
from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels, LoadPlan
from langgraph_devsched._dev.stress.models_kit import (
    LOAD_MODES,
    LoadMode,
    model_name,
    model_node,
    model_tool,
    plain_tool,
    sim_params,
)

STEP_LIMIT_S = 5.0
SETTLE_S = 3.0
DEADLINE_S = 0.1


def run_step(graph: Any, inputs: dict[str, Any], use_async: bool,
             limit_s: float = STEP_LIMIT_S) -> tuple[Any, str | None]:
    """One step, ``invoke`` in a bounded thread or ``ainvoke`` in a fresh loop (closed
    without waiting for its default executor: a load a timed-out call left in
    ``asyncio.to_thread`` runs on there)."""
    if not use_async:
        return call_within(functools.partial(graph.invoke, inputs), limit_s)
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(within(graph.ainvoke(inputs), limit_s))
    finally:
        loop.close()


def settle(models: LiveModels, ledger: LiveLedger | None) -> bool:
    """Wait (bounded) until no load runs and no call holds the ledger."""
    def quiet() -> bool:
        return models.loading() == 0 and (
            ledger is None or (ledger.active == 0 and ledger.queued == 0
                               and abs(ledger.working_mb) <= 1e-6))
    return asyncio.run(wait_until(quiet, SETTLE_S))


def rest_checks(result: ProbeResult, models: LiveModels, ledger: LiveLedger | None,
                what: str) -> bool:
    """At rest: live instances == residents; the checked ledger's and loaders' problems."""
    ok = result.check(settle(models, ledger), f"{what}: a load or a call still running "
                      f"after {SETTLE_S:g} s")
    if ledger is None:
        return ok
    for problem in ledger.at_rest_problems():
        ok = result.check(False, f"{what}, at rest: {problem}")
    for problem in ledger.problems:
        ok = result.check(False, f"{what}: {problem}")
    ledger.problems.clear()
    for problem in models.problems:
        ok = result.check(False, f"{what}: {problem}")
    models.problems.clear()
    return ok


def close_checks(result: ProbeResult, node: Any, models: LiveModels,
                 ledger: LiveLedger | None, what: str) -> bool:
    node.close()
    if ledger is None:
        return True
    ok = result.check(ledger.in_use_mb <= 1e-6 and not ledger.resident(),
                      f"{what}, after close: {ledger.in_use_mb:.0f} MB, "
                      f"{len(ledger.resident())} resident")
    left = models.live_gpu_mb()
    return ok & result.check(not left, f"{what}, after close: instances still live {left}")


def _is_error_with(text: str) -> Callable[[str, ToolMessage], bool]:
    return lambda cid, m: m.status == "error" and text in str(m.content)


# -- loader_error ---------------------------------------------------------------------------
def loader_error(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    rng = ctx.rng
    models = LiveModels()
    decl = models.handle(model_name(ctx, "decl"), 3000.0)
    undecl = models.handle(model_name(ctx, "undecl"), 3000.0)
    for handle in (decl, undecl):
        models.plans[handle.name] = LoadPlan(raises=True)
    mode: LoadMode = rng.choice(LOAD_MODES)
    use_async = mode != "sync" or rng.random() < 0.5
    result.count(f"{mode}:{'async' if use_async else 'sync'}")
    hints: dict[str, dict[str, Any]] = {
        "t_decl": decl.hints(vram_mb=500.0, pinned="gpu_now"),
        "t_undecl": {"vram_mb": 500.0, "pinned": "gpu_now"},
        "big": {"vram_mb": 6000.0, "pinned": "gpu_now"},
    }
    tools = [model_tool("t_decl", decl, models, mode), model_tool("t_undecl", undecl, models, mode),
             plain_tool("big")]
    node, ledger = model_node(ctx, models, tools, hints, sim_params=sim_params(hints))
    graph = graph_of(node)
    ids = {"decl": f"le{ctx.index}d", "undecl": f"le{ctx.index}u"}
    order = [("decl", "t_decl"), ("undecl", "t_undecl")]
    rng.shuffle(order)
    out, why = run_step(graph, step_input([(ids[k], t) for k, t in order]), use_async)
    answered = result.check(why is None, f"step with failing loads: {why}") and check_answered(
        result, out, list(ids.values()), "failing loads",
        expect=_is_error_with("injected load error"))
    ok = dict.fromkeys(ids, answered)
    before = len(result.problems)
    rest_checks(result, models, ledger, "after the failing loads")
    at_rest = result.problems[before:]
    if ledger is not None:
        resident = {w.model for w in ledger.resident()}
        for key, handle in (("decl", decl), ("undecl", undecl)):
            ok[key] &= result.check(handle.name not in resident,
                                    f"{handle.name!r} resident after its load raised")
    for key, handle in (("decl", decl), ("undecl", undecl)):  # a problem naming the other
        other = undecl if handle is decl else decl             # model is not this one's
        ok[key] &= not [p for p in at_rest if f"'{other.name}'" not in p]
    big = f"le{ctx.index}b"
    out, why = run_step(graph, step_input([(big, "big")]), use_async)

    def on_gpu(cid: str, m: ToolMessage) -> bool:  # the testbed's residency is virtual
        return m.status != "error" and (ledger is None or not str(m.content).endswith("@cpu"))

    fits = result.check(why is None, f"the 6,000 MB step: {why}") and check_answered(
        result, out, [big], "the 6,000 MB gpu_now call on the emptied GPU", expect=on_gpu)
    closed = close_checks(result, node, models, ledger, "loader_error")
    for key in ids:
        result.case(ok[key] and fits and closed)
    return result


# -- slow_load ------------------------------------------------------------------------------
def _other_model_step(ctx: ProbeContext, result: ProbeResult, graph: Any, use_async: bool,
                      what: str) -> bool:
    """While the first load still runs: a 6,000 MB model asked for (its load must not push
    the instances over the budget: the checked ledger says)."""
    cid = f"{ctx.kind[:2]}{ctx.index}o"
    out, why = run_step(graph, step_input([(cid, "t_other")]), use_async)
    ok = result.check(why is None, f"{what}: the step beside the running load: {why}")
    return ok and check_answered(result, out, [cid], f"{what}: the call beside the load",
                                 expect=lambda c, m: m.status != "error")


def _gated_models(ctx: ProbeContext, mode: LoadMode) -> tuple[
        LiveModels, threading.Event, list[Any], dict[str, dict[str, Any]]]:
    models = LiveModels()
    gate = threading.Event()
    slow = models.handle(model_name(ctx, "slow"), 5000.0)
    other = models.handle(model_name(ctx, "other"), 6000.0)
    models.plans[slow.name] = LoadPlan(gate=gate)
    hints: dict[str, dict[str, Any]] = {
        "t_slow": slow.hints(vram_mb=500.0, pinned="gpu_now"),
        "t_other": other.hints(vram_mb=500.0, pinned="gpu_now"),
    }
    tools = [model_tool("t_slow", slow, models, mode),
             model_tool("t_other", other, models, "sync")]
    return models, gate, tools, hints


def slow_load(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    for mode in ("sync", "thread"):
        use_async = mode == "thread" or ctx.rng.random() < 0.5
        result.count(f"{mode}:{'async' if use_async else 'sync'}")
        models, gate, tools, hints = _gated_models(ctx, mode)
        node, ledger = model_node(ctx, models, tools, hints, sim_params=sim_params(hints),
                                  call_timeout_s=DEADLINE_S)
        graph = graph_of(node)
        what = f"slow load ({mode} tool)"
        cid = f"sl{ctx.index}{mode[0]}"
        try:
            out, why = run_step(graph, step_input([(cid, "t_slow")]), use_async)
            ok = result.check(why is None, f"{what}: {why}") and check_answered(
                result, out, [cid], what, expect=_is_error_with("timed out"))
            if models.loading():
                ok &= _other_model_step(ctx, result, graph, use_async, what)
        finally:
            gate.set()
        ok &= rest_checks(result, models, ledger, what)
        ok &= close_checks(result, node, models, ledger, what)
        result.case(ok)
    return result


# -- cancel_load ----------------------------------------------------------------------------
def cancel_load(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    for mode in ctx.rng.sample(LOAD_MODES, 2):
        result.count(mode)
        result.case(asyncio.run(_cancel_one(ctx, result, mode)))
    return result


async def _cancel_one(ctx: ProbeContext, result: ProbeResult, mode: LoadMode) -> bool:
    models, gate, tools, hints = _gated_models(ctx, mode)
    task: asyncio.Task[Any] | None = None
    slow_name = hints["t_slow"]["model"]
    if mode == "inline":  # the load blocks the loop: it cancels its own task as it starts
        def cancel_me() -> None:
            if task is not None:
                task.cancel()
        models.plans[slow_name] = LoadPlan(on_start=cancel_me)
    node, ledger = model_node(ctx, models, tools, hints, sim_params=sim_params(hints))
    graph = graph_of(node)
    what = f"cancel during a load ({mode} tool)"
    cid = f"cl{ctx.index}{mode[0]}"
    ok = True
    try:
        task = asyncio.ensure_future(graph.ainvoke(step_input([(cid, "t_slow")])))
        started = await wait_until(models.load_started.is_set, 2.0)
        ok &= result.check(started, f"{what}: the load never started")
        task.cancel()
        try:
            await asyncio.wait_for(task, 2.0)
            ok &= result.check(mode == "inline" and False, f"{what}: ainvoke returned")
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            ok &= result.check(False, f"{what}: ainvoke raised {type(exc).__name__}: {exc}")
        await asyncio.sleep(0.01)
        if models.loading():
            ok &= await asyncio.to_thread(_other_model_step, ctx, result, graph, False, what)
    finally:
        gate.set()
    ok &= await asyncio.to_thread(rest_checks, result, models, ledger, what)
    ok &= close_checks(result, node, models, ledger, what)
    return ok
