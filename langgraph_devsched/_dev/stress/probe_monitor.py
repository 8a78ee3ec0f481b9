"""Scenario probes on the runtime monitor: malformed stats, separator tool names, writers.

* `bad_stats`: stats that pass JSON validation but carry malformed keys (``"bogus"``, an
  unknown option, an outcome key without a placement), from a file or a LangGraph store, and
  hostile files (JSON nested 10^5 deep, a 5,000-digit int): the load must not raise and must
  keep none of it (cold start), and steps through a node with that monitor are answered.
* `separator_names`: tools whose names contain ``|``, ``,`` and ``=`` (the monitor's key
  separators) used through the monitor: steps answered, snapshot per tool, round trip exact.
* `stats_writers`: threads saving the same stats file at once while another loads it: no
  exception, every load finds the saved stats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import warnings
from typing import Any

from langgraph.store.memory import InMemoryStore

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    call_within,
    check_answered,
    graph_of,
    make_tool,
    node_for,
    step_input,
    within,
)
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.persist import STORE_KEY, STORE_NAMESPACE
from langgraph_devsched.monitor.state import (
    FORMAT_NAME,
    FORMAT_VERSION,
    KeyStats,
    MonitorState,
    OutcomeStats,
)
from langgraph_devsched.monitor.stats import RunningStat

STEP_LIMIT_S = 5.0
BAD_STATS: tuple[str, ...] = (
    "bogus_key", "unknown_option", "outcome_without_placement", "deep_nesting", "huge_int",
)
"""The malformed stats `bad_stats` loads (the first three from a file or a store)."""

_HINTS: dict[str, dict[str, Any]] = {
    "pa": {"vram_mb": 500, "gpu_share": 0.5},
    "pb": {"vram_mb": 300, "preferred": "cpu"},
}
_GOOD_KEY = "pa|cpu|gpu0-cpu0-low-idle"


def _echo(name: str) -> Any:
    def run(payload: str) -> str:
        return f"{name}:{payload}"

    async def arun(payload: str) -> str:
        return f"{name}:{payload}"

    return make_tool(name, run, arun)


def _good_data() -> dict[str, Any]:
    stat = RunningStat().add(12.0, step=1).add(14.0, step=2)
    stats = {_GOOD_KEY: KeyStats(run=stat, latency=stat, device="cpu")}
    return MonitorState(step=2, stats=stats).model_dump(mode="json")


def bad_stats_payload(variant: str) -> dict[str, Any] | str:
    """Data for ``variant`` (a dict: JSON-valid, bad keys) or a file's text (hostile)."""
    data = _good_data()
    if variant == "bogus_key":
        data["stats"]["bogus"] = KeyStats().model_dump(mode="json")
    elif variant == "unknown_option":
        data["stats"]["pa|tpu|gpu0-cpu0-low-idle"] = KeyStats().model_dump(mode="json")
    elif variant == "outcome_without_placement":
        data["outcomes"]["pa"] = OutcomeStats().model_dump(mode="json")
    elif variant == "deep_nesting":
        head = f'{{"format": "{FORMAT_NAME}", "version": {FORMAT_VERSION}, "stats": '
        return head + "[" * 100_000 + "]" * 100_000 + "}"
    elif variant == "huge_int":
        head = f'{{"format": "{FORMAT_NAME}", "version": {FORMAT_VERSION}, "step": '
        return head + "7" * 5000 + "}"
    else:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(BAD_STATS)}")
    return data


def _malformed_left(state: MonitorState) -> list[str]:
    bad = [k for k in state.stats if k.count("|") != 2 or k.split("|")[1] not in
           ("gpu_now", "gpu_queued", "cpu")]
    bad += [k for k in state.outcomes if "|" not in k]
    return bad


async def _two_steps(
    ctx: ProbeContext, monitor: RuntimeMonitor, result: ProbeResult, what: str
) -> bool:
    node, _ = node_for(ctx, [_echo("pa"), _echo("pb")], _HINTS, monitor=monitor)
    graph = graph_of(node)
    ok = True
    for i, run_async in enumerate((False, True)):
        ids = [f"b{ctx.index}s{i}c{j}" for j in range(3)]
        inputs = step_input([(ids[0], "pa"), (ids[1], "pb"), (ids[2], "pa")])
        if run_async:
            out, why = await within(graph.ainvoke(inputs), STEP_LIMIT_S)
        else:
            out, why = await asyncio.to_thread(
                call_within, lambda inputs=inputs: graph.invoke(inputs), STEP_LIMIT_S
            )
        mode = "async" if run_async else "sync"
        ok &= result.check(why is None, f"{what}: {mode} step {why}")
        if why is None:
            ok &= check_answered(result, out, ids, f"{what}: {mode} step")
    return ok


def bad_stats(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    variant = ctx.rng.choice(BAD_STATS)
    hostile = variant in ("deep_nesting", "huge_int")
    source = "file" if hostile else ctx.rng.choice(("file", "store"))
    what = f"{variant} from a {source}"
    result.count(f"{variant}:{source}")
    payload = bad_stats_payload(variant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if source == "file":
                path = ctx.tmp / f"bad_stats_{ctx.index}.json"
                text = payload if isinstance(payload, str) else json.dumps(payload)
                path.write_text(text, encoding="utf-8")
                monitor = RuntimeMonitor.load(path)
            else:
                store = InMemoryStore()
                store.put(STORE_NAMESPACE, STORE_KEY, payload)  # type: ignore[arg-type]
                monitor = RuntimeMonitor.load_from_store(store)
        except Exception as exc:
            result.check(False, f"{what}: loading raised {type(exc).__name__}: {str(exc)[:120]}")
            result.case(False)
            return result
        state = monitor.state
        cold = state.step == 0 and not state.stats and not state.outcomes
        result.count("cold" if cold else "kept_valid_part")
        left = _malformed_left(state)
        ok = result.check(not left, f"{what}: loaded with malformed keys {left} (expected cold)")
        if hostile:
            ok &= result.check(cold, f"{what}: loaded as step {state.step} (expected cold)")
        ok &= asyncio.run(_two_steps(ctx, monitor, result, what))
    result.case(ok)
    return result


SEPARATOR_TOOLS: dict[str, dict[str, Any]] = {
    "ocr|v2": {"vram_mb": 800, "gpu_share": 0.5},
    "embed,fast": {"vram_mb": 200, "preferred": "cpu"},
    "a=b|c,d": {"vram_mb": 400},
}
"""Tool names holding the monitor's separators (``|`` in stats keys, ``,`` and ``=`` in
shapes and placements)."""


def separator_names(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    names = list(SEPARATOR_TOOLS)
    monitor = RuntimeMonitor()
    node, _ = node_for(ctx, [_echo(n) for n in names], SEPARATOR_TOOLS, monitor=monitor)
    graph = graph_of(node)

    async def steps() -> bool:
        ok = True
        for i in range(4):
            tools = [ctx.rng.choice(names) for _ in range(ctx.rng.randint(2, 4))]
            ids = [f"p{ctx.index}s{i}c{j}" for j in range(len(tools))]
            inputs = step_input(list(zip(ids, tools, strict=True)))
            if i % 2:
                out, why = await within(graph.ainvoke(inputs), STEP_LIMIT_S)
            else:
                out, why = await asyncio.to_thread(
                    call_within, lambda inputs=inputs: graph.invoke(inputs), STEP_LIMIT_S
                )
            ok &= result.check(why is None, f"step {i} ({', '.join(tools)}) {why}")
            if why is None:
                ok &= check_answered(
                    result, out, ids, f"step {i}",
                    expect=lambda cid, m: str(m.content).endswith(f":{cid}"),
                )
        return ok

    ok = asyncio.run(steps())
    try:
        obs = monitor.snapshot()
        seen = {e.tool for e in obs.estimates}
        ok &= result.check(seen <= set(names), f"estimates for tools {sorted(seen - set(names))}")
        for shape in {o.shape for o in obs.outcomes}:
            ok &= result.check(set(shape) <= set(names), f"outcome shape {shape} splits names")
        path = ctx.tmp / f"separators_{ctx.index}.json"
        monitor.save(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            back = RuntimeMonitor.load(path).state
        ok &= result.check(back == monitor.state, "stats did not survive a save/load round trip")
    except Exception as exc:
        ok = result.check(False, f"monitor snapshot/save raised {type(exc).__name__}: {exc}"[:200])
    result.case(ok)
    return result


def stats_writers(ctx: ProbeContext, *, writers: int = 4, saves: int = 5) -> ProbeResult:
    result = ProbeResult()
    path = ctx.tmp / f"writers_{ctx.index}.json"
    stat = RunningStat().add(3.0, step=1)
    state = MonitorState(step=7, stats={_GOOD_KEY: KeyStats(run=stat, latency=stat)})
    RuntimeMonitor(state=state.model_copy(deep=True)).save(path)
    errors: list[str] = []
    bad_loads: list[str] = []
    start = threading.Barrier(writers + 1, timeout=5.0)

    def write() -> None:
        monitor = RuntimeMonitor(state=state.model_copy(deep=True))
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait()
        for _ in range(saves):
            try:
                monitor.save(path)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:160])

    def read() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait()
        for _ in range(saves * 2):
            try:
                loaded = RuntimeMonitor.load(path).state
            except Exception as exc:
                bad_loads.append(f"raised {type(exc).__name__}")
                continue
            if loaded.step != 7:
                bad_loads.append(f"loaded step {loaded.step}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=write, daemon=True) for _ in range(writers)]
        threads.append(threading.Thread(target=read, daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(10.0)
        final = RuntimeMonitor.load(path).state
    ok = result.check(not any(t.is_alive() for t in threads), "a writer or the reader hung")
    ok &= result.check(not errors, f"{len(errors)} save(s) raised, e.g. {errors[:1]}")
    ok &= result.check(not bad_loads, f"{len(bad_loads)} load(s) during the saves: {bad_loads[:2]}")
    ok &= result.check(final == state, f"after the saves the file loads as step {final.step}")
    result.count("save_errors", len(errors))
    result.case(ok)
    return result
