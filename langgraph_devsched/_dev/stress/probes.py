"""Scenario faults: what each probe does, where it applies, and a bounded way to run one.

A probe builds its own small `DeviceToolNode`, drives it through the failure class it is
named after and returns a `ProbeResult`. `run_probe` runs it in a daemon thread of its own
(its event loops are its own, so a starved or blocked loop cannot stall the harness) and
waits ``limit_s`` at most: a hung probe, or one that raised, is a violation, never a crash
or a hang of the harness.

>>> import pathlib, tempfile
>>> ctx = ProbeContext("stats_writers", 0, "none", 1, pathlib.Path(tempfile.mkdtemp()))
>>> r = run_probe(ctx, 10.0)
>>> r.injected
1
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

from langgraph_devsched._dev.stress.kit import ProbeContext, ProbeResult
from langgraph_devsched._dev.stress.probe_gpu import cancel_gpu_sync, oom_cpu_slots
from langgraph_devsched._dev.stress.probe_gpus import (
    cap_beside_idle,
    cross_gpu_get,
    evictable_only_fit,
)
from langgraph_devsched._dev.stress.probe_hostile import cut_calibration, hostile_ids
from langgraph_devsched._dev.stress.probe_llm import llm_garbage_flood, llm_hang_flood
from langgraph_devsched._dev.stress.probe_loads import cancel_load, loader_error, slow_load
from langgraph_devsched._dev.stress.probe_models import resident_models
from langgraph_devsched._dev.stress.probe_monitor import bad_stats, separator_names, stats_writers
from langgraph_devsched._dev.stress.probe_room import (
    close_during_call,
    deadline_queue,
    kept_no_room,
)
from langgraph_devsched._dev.stress.probe_steps import (
    cross_loop,
    max_concurrency,
    reused_ids,
    timeout,
)

__all__ = ["PROBES", "PROBE_BACKENDS", "PROBE_EXPECTED", "ProbeContext", "ProbeResult", "run_probe"]

Probe = Callable[[ProbeContext], ProbeResult]

BOTH = ("simulated", "local")
PROBES: dict[str, tuple[Probe, tuple[str, ...], str]] = {
    "bad_stats": (
        bad_stats, BOTH,
        "malformed keys (bogus, unknown option, outcome without placement) from a file or a "
        "store, JSON nested 10^5 deep, a 5,000-digit int: load does not raise and keeps none "
        "of it (cold start); a sync and an async step answered",
    ),
    "separator_names": (
        separator_names, BOTH,
        "tools named with | , = through the monitor: 4 steps answered, estimates and shapes "
        "keep the names whole, save/load round trip exact",
    ),
    "cross_loop": (
        cross_loop, BOTH,
        "the same step (thread_id, call ids) from 3 threads, each asyncio.run(ainvoke) (one "
        "injection per loop): each invocation answers every call once within 1 s",
    ),
    "reused_ids": (
        reused_ids, BOTH,
        "3 concurrent steps reusing 2 call ids for a CPU-forbidden pinned GPU tool, a CPU-only "
        "tool and a gpu_queued-pinned tool: each call runs where its own hints allow (device "
        "seen by the tool, CallRecord option), 3 reports",
    ),
    "cancel_gpu_sync": (
        cancel_gpu_sync, ("local",),
        "ainvoke cancelled while a sync tool runs on the GPU: the ledger keeps its VRAM until "
        "the thread returns, true VRAM <= budget; cancelled in the GPU queue: step reported, "
        "monitor recorded, queue empty",
    ),
    "oom_cpu_slots": (
        oom_cpu_slots, ("local",),
        "cpu_workers=1 and GPU OOM reruns on the CPU: at most 1 CPU run at once (counted by "
        "the tools); every call answered from the CPU",
    ),
    "llm_hang_flood": (
        llm_hang_flood, BOTH,
        "a sync model hanging for more consecutive steps than the default executor has "
        "threads: each step answered within timeout + 1.5 s, loop never blocked over 1.5 s nor "
        "starved",
    ),
    "llm_garbage_flood": (
        llm_garbage_flood, BOTH,
        "300,000-character garbage answers: each step answered within timeout + 1.5 s, loop "
        "never blocked over 1.5 s",
    ),
    "stats_writers": (
        stats_writers, ("none",),
        "4 threads saving the same stats file 5 times each while a reader loads it: no "
        "exception, every load finds the stats",
    ),
    "timeout": (
        timeout, BOTH,
        "a hanging sync GPU tool under call_timeout_s or hint timeout_s: error ToolMessage "
        "'timed out' at the deadline, CallRecord error 'timeout...', VRAM held until the "
        "thread returns, true VRAM <= budget (local)",
    ),
    "resident_models": (
        resident_models, ("local",),
        "2-6 calls on 4 resident models whose weights do not fit together (8,000 MB), random "
        "options, GPU OOMs and tool errors, twice: every call answered once, the ledger equal "
        "to resident weights + working memory at every grant and release, never over budget, "
        "weights only at rest, 0 after close, each instance released once",
    ),
    "max_concurrency": (
        max_concurrency, BOTH,
        "a step run with config max_concurrency=k (1-3) never runs more than k calls at once",
    ),
    "loader_error": (
        loader_error, BOTH,
        "the loads of a model named in the hints and of one not named raise: each call "
        "answered with the load's error; no phantom weights (local: live instances == "
        "residents at rest); a 6,000 MB gpu_now call then placed on the emptied GPU",
    ),
    "slow_load": (
        slow_load, BOTH,
        "a load past call_timeout_s (sync tool; async tool via to_thread(handle.get)): "
        "'timed out' at the deadline; (local) its weights counted while it loads on, a "
        "6,000 MB model beside it never puts the instances over the budget, instances == "
        "residents once it ends",
    ),
    "cancel_load": (
        cancel_load, BOTH,
        "ainvoke cancelled during a load (sync tool, async inline, async via to_thread): "
        "(local) the ledger counts the loading instance at every grant and release, the "
        "instances stay within the budget, instances == residents once the load ends",
    ),
    "close_during_call": (
        close_during_call, BOTH,
        "node.close() while a call runs on its model, and while that model loads: its "
        "instance never released under it, the call answered; (local) instances == "
        "residents at rest, nothing of the closed model once the call ended; the node "
        "still serves",
    ),
    "kept_no_room": (
        kept_no_room, BOTH,
        "an idle kept model (keep_warm, or loaded the tool's own way) leaves no room for a "
        "gpu_queued call on another model: refused at once, answered from the CPU with a "
        "fallback cause, the call beside it answered; never a queue waiting on nothing",
    ),
    "deadline_queue": (
        deadline_queue, BOTH,
        "a gpu_queued call behind a timed-out sync tool (its VRAM, or the gpu_concurrency "
        "slot): answered within its deadline + 0.5 s + 10x a plain step's time",
    ),
    "cut_calibration": (
        cut_calibration, BOTH,
        "an idle calibration run of a sync tool cut by the next step: its thread keeps its "
        "6,000 MB (the next GPU call: CPU, oom) or its CPU slot (cpu_workers=1) until it "
        "returns, tools never over the budget nor 2 CPU runs at once (local); the next step "
        "answered once",
    ),
    "cross_gpu_get": (
        cross_gpu_get, ("local",),
        "a tool on cuda:a asks for get('cuda:b'), then a 7,000 MB call on cuda:b: the "
        "weights count on cuda:b's ledger, every GPU's ledger equals its live instances at "
        "every grant and release and at rest, never over budget, 0 after close",
    ),
    "cap_beside_idle": (
        cap_beside_idle, ("local",),
        "gpu_concurrency=1, another step's call on the roomiest GPU: 1..k-1 gpu_now or "
        "gpu_queued calls naming no GPU run at once on the idle GPUs, none on the CPU",
    ),
    "evictable_only_fit": (
        evictable_only_fit, BOTH,
        "the only GPU that fits 14,000 + 1,000 MB holds an idle 17,000 MB model: every "
        "drawn scheduler's call runs there (the model evicted), never on the CPU; (local) "
        "live instances == residents on every GPU",
    ),
    "hostile_ids": (
        hostile_ids, BOTH,
        "call ids like a hedge's (x~hedge, x~hedge~2), Unicode, separators, 200 characters, "
        "x hedged: one answer per id with its own output, one record entry per id, each on "
        "the device it was decided",
    ),
}
"""Kind -> (probe, the backends it applies to, its expected outcome)."""

PROBE_BACKENDS: dict[str, tuple[str, ...]] = {k: v[1] for k, v in PROBES.items()}
PROBE_EXPECTED: dict[str, str] = {k: v[2] for k, v in PROBES.items()}


def run_probe(ctx: ProbeContext, limit_s: float) -> ProbeResult:
    """Run the probe of ``ctx.kind`` in its own thread, waiting ``limit_s`` at most."""
    probe = PROBES[ctx.kind][0]
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = probe(ctx)
        except BaseException as exc:
            box["error"] = exc
            box["where"] = traceback.format_exc(limit=-3).strip().splitlines()[-3:]

    thread = threading.Thread(target=target, daemon=True, name=f"devsched-stress-{ctx.kind}")
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        return ProbeResult(
            injected=1, problems=[f"probe {ctx.index} did not finish within {limit_s:g} s (hung)"]
        )
    if "error" in box:
        exc = box["error"]
        return ProbeResult(
            injected=1,
            problems=[f"probe {ctx.index} raised {type(exc).__name__}: {str(exc)[:160]} "
                      f"at {' | '.join(box['where'])[:200]}"],  # type: ignore[arg-type]
        )
    result = box["result"]
    assert isinstance(result, ProbeResult)
    return result
