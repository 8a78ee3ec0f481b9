"""What the machine-wide ledger adds to a call: reserve plus release against the shared
store (``LocalBackend(shared=...)``) and against the in-process ledger, in one run.

Two figures, each alternating A (in-process) and B (shared) so that a drift in the
machine's speed hits both alike:

* **ledger** — one ``try_reserve`` plus its ``release`` (the pair a GPU call makes), timed
  alone: p50 and p99 of each side and of the per-pair difference;
* **node** — a step of three no-op GPU calls (100 MB each, ``gpu_now``) through a compiled
  graph on a declared GPU: p50 and p99 of each side, and the added time a call.

>>> doc = measure_shared(pairs=20, steps=4)
>>> sorted(doc["ledger"]), doc["node"]["calls_per_step"]
(['added_p50_ms', 'added_p99_ms', 'in_process', 'pairs', 'shared'], 3)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph_devsched._dev.perf.overhead import TOOL_NAMES, noop_tools, one_node_graph, step_input


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_pct(ms, 0.5), 4), "p99_ms": round(_pct(ms, 0.99), 4)}


def _pairs(ledger: Any, n: int, clock: Callable[[], float]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = clock()
        res = ledger.try_reserve(100.0)
        res.release()
        out.append((clock() - t0) * 1000.0)
    return out


def measure_shared(*, pairs: int = 2000, steps: int = 400, settle: int = 50,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Both figures (see the module docstring); the shared store is a temporary file."""
    from langgraph_devsched.executors.local import GpuConfig, LocalBackend
    from langgraph_devsched.node import DeviceToolNode

    if pairs < 1 or steps < 1:
        raise ValueError(f"pairs and steps must be >= 1, got {pairs} and {steps}")
    with tempfile.TemporaryDirectory(prefix="devsched-perf-") as folder:
        path = Path(folder) / "ledger.db"
        local = LocalBackend(gpu=GpuConfig(vram_budget_mb=8000))
        shared = LocalBackend(gpu=GpuConfig(vram_budget_mb=8000), shared=path)
        la, lb = local.ledger, shared.ledger
        a_ms: list[float] = []
        b_ms: list[float] = []
        diffs: list[float] = []
        _pairs(la, settle, clock), _pairs(lb, settle, clock)
        for i in range(pairs):
            first, second = (lb, la) if i % 2 else (la, lb)
            t = {id(led): _pairs(led, 1, clock)[0] for led in (first, second)}
            a_ms.append(t[id(la)])
            b_ms.append(t[id(lb)])
            diffs.append(t[id(lb)] - t[id(la)])
        ledger = {"pairs": pairs, "in_process": _summary(a_ms), "shared": _summary(b_ms),
                  "added_p50_ms": round(statistics.median(diffs), 4),
                  "added_p99_ms": round(_pct(b_ms, 0.99) - _pct(a_ms, 0.99), 4)}
        hints = {n: {"vram_mb": 100.0, "pinned": "gpu_now"} for n in TOOL_NAMES}
        ga = one_node_graph(DeviceToolNode(noop_tools(), hints=hints, backend=local))
        gb = one_node_graph(DeviceToolNode(noop_tools(), hints=hints, backend=shared))
        sa: list[float] = []
        sb: list[float] = []
        sd: list[float] = []
        for i in range(settle + steps):
            state = step_input(i)
            spent = {}
            for g in ((gb, ga) if i % 2 else (ga, gb)):
                t0 = clock()
                g.invoke(state)
                spent[id(g)] = (clock() - t0) * 1000.0
            if i >= settle:
                sa.append(spent[id(ga)])
                sb.append(spent[id(gb)])
                sd.append(spent[id(gb)] - spent[id(ga)])
        calls = len(TOOL_NAMES)
        node = {"steps": steps, "calls_per_step": calls, "in_process": _summary(sa),
                "shared": _summary(sb),
                "added_p50_ms_a_call": round(statistics.median(sd) / calls, 4),
                "added_p99_ms_a_call": round((_pct(sb, 0.99) - _pct(sa, 0.99)) / calls, 4)}
        shared.close()
        local.close()
    return {"ledger": ledger, "node": node}
