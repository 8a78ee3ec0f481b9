#!/usr/bin/env python3
"""Resident models on a real GPU: two suite tools through a `DeviceToolNode` + `LocalBackend`.

    python scripts/gpu_residency_check.py [--device cuda|cpu] [--size full|small] [--json PATH]

On ``cuda`` (a detected GPU; the backend's VRAM budget is set just large enough for either
model alone, not for both): ``rerank_passages`` runs twice (cold load, then a warm hit: the
records' ``loaded``/``load_ms``, the two latencies), then ``match_image_text`` (its model's
weights do not fit beside the first's: the first is evicted, ``CallRecord.evicted``), then
``node.close()``. At each point the ledger's resident weights are compared with what
``torch.cuda.memory_allocated`` shows: the memory left allocated after a call over the
baseline (loose: cuBLAS keeps a workspace per thread), and the memory ``close`` frees (tight).

``--device cpu`` runs the same steps on the host (a `LocalBackend(gpu=False, max_models=1)`:
the host side keeps one model, so the second load drops the first) and skips the CUDA-only
comparisons; the tests run it that way so that the script does not rot.

Prints one ``PASS``/``FAIL``/``INFO`` line per check and a summary; exit status 0 when every
check passed, 1 when one failed, 2 when ``--device cuda`` finds no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLD_TOOL, OTHER_TOOL = "rerank_passages", "match_image_text"
LOOSE_MB, LOOSE_SHARE = 128.0, 0.10
"""Memory left allocated after a call vs the ledger: 128 MB or 10% (cuBLAS keeps a workspace
per thread, tens of MB on Hopper), well under the 418 MB an unfreed full reranker would add."""
TIGHT_MB, TIGHT_SHARE = 2.0, 0.02
"""Memory freed by ``close`` vs the ledger's weights before it: 2 MB or 2%."""


@dataclass
class Checks:
    """PASS/FAIL/INFO lines, printed as they come, and what the JSON report keeps."""

    results: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return bool(ok)

    def info(self, name: str, detail: str) -> None:
        print(f"INFO {name}: {detail}", flush=True)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if not r["ok"])


def close_enough(a: float, b: float, mb: float, share: float) -> bool:
    return abs(a - b) <= max(mb, share * max(abs(a), abs(b)))


def _scheduler(option: str) -> Any:
    from langgraph_devsched.schedulers.base import SchedulerBase

    class Fixed(SchedulerBase):
        name = f"every_call_{option}"

        def decide(self, batch: Any, view: Any) -> Any:
            return self._decision({c.call_id: option for c in batch.calls}, self.name)

    return Fixed()


def _allocated_mb() -> float:
    import torch

    torch.cuda.synchronize()
    return float(torch.cuda.memory_allocated(0)) / 2**20


def run_check(device: str, size: str) -> Checks:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from langgraph_devsched import DeviceToolNode, LocalBackend
    from langgraph_devsched.hints import code_hints
    from langgraph_devsched.suite import EXAMPLE_ARGS_KEY, builtin_tools

    out = Checks()
    cuda = device == "cuda"
    tools = {t.name: t for t in builtin_tools(size)}
    a, b = tools[COLD_TOOL], tools[OTHER_TOOL]
    ha, hb = code_hints(a) or {}, code_hints(b) or {}
    model_a, model_b = ha["model"], hb["model"]
    wa, va, wb, vb = ha["weights_mb"], ha["vram_mb"], hb["weights_mb"], hb["vram_mb"]
    alone = max(wa + va, wb + vb)
    together = wa + wb + vb  # b admitted beside a's resident weights
    budget = alone + min(8.0 + 0.02 * alone, (together - alone) / 2)
    out.figures.update(device=device, size=size, budget_mb=round(budget, 1),
                       models={model_a: wa, model_b: wb})
    if cuda:
        import torch

        torch.ones(256, 256, device="cuda:0") @ torch.ones(256, 256, device="cuda:0")
        backend = LocalBackend(vram_budget_mb=budget, queue_timeout_s=300)
        option = "gpu_queued"
        out.check("setup", together > budget >= alone and backend.ledger is not None,
                  f"budget {budget:.1f} MB: {model_a} ({wa} MB weights + {va} MB working) or "
                  f"{model_b} ({wb} + {vb}) fit alone, not together ({together} MB)")
        base = _allocated_mb()
    else:
        backend = LocalBackend(gpu=False, max_models=1)
        option = "cpu"
        out.info("setup", f"on the host: {model_a} and {model_b}, the host keeps one model")
        base = 0.0
    node = DeviceToolNode([a, b], backend=backend, scheduler=_scheduler(option))
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()

    def call(tool: Any, i: int) -> tuple[Any, float]:
        args = dict(tool.metadata[EXAMPLE_ARGS_KEY])
        msg = AIMessage("", tool_calls=[{"name": tool.name, "args": args, "id": f"c{i}"}])
        t0 = time.perf_counter()
        result = graph.invoke({"messages": [msg]})
        ms = (time.perf_counter() - t0) * 1000.0
        (answer,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        if answer.status == "error":
            raise RuntimeError(f"{tool.name} failed: {answer.content}")
        return node.history[-1].record.calls[0], ms

    on = "cuda:0" if cuda else "cpu"
    # 1. cold, then warm
    cold, cold_ms = call(a, 0)
    warm, warm_ms = call(a, 1)
    out.figures.update(cold_ms=round(cold_ms, 1), warm_ms=round(warm_ms, 1),
                       load_ms=round(cold.load_ms, 1))
    out.check("placed", cold.device == warm.device == on,
              f"both calls ran on {cold.device} / {warm.device} (wanted {on})")
    out.check("cold load", cold.loaded and cold.load_ms > 0 and cold.model == model_a,
              f"first call loaded={cold.loaded} load_ms={cold.load_ms:.1f} model={cold.model}")
    out.check("warm hit", not warm.loaded and warm.load_ms == 0 and warm.model == model_a,
              f"second call loaded={warm.loaded} load_ms={warm.load_ms:.1f}")
    latency = f"cold {cold_ms:.1f} ms (load {cold.load_ms:.1f} ms), warm {warm_ms:.1f} ms"
    if cuda:
        out.check("warm faster", warm_ms < cold_ms, latency)
    else:
        out.info("latency", latency)
    ledger = backend.ledger
    instance_a = _instance(backend, model_a, on)
    if cuda:
        assert ledger is not None
        resident = _allocated_mb() - base
        out.figures.update(ledger_weights_mb_a=round(ledger.weights_mb, 2),
                           allocated_mb_a=round(resident, 2))
        out.check("ledger vs memory_allocated (one model)",
                  close_enough(ledger.weights_mb, resident, LOOSE_MB, LOOSE_SHARE),
                  f"ledger {ledger.weights_mb:.1f} MB, allocated over baseline "
                  f"{resident:.1f} MB, declared {wa} MB")
        out.check("declared vs loaded", close_enough(ledger.weights_mb, wa, TIGHT_MB, 0.05),
                  f"ledger (measured load) {ledger.weights_mb:.1f} MB, declared {wa} MB")
    # 2. the second model evicts the first
    other, _ = call(b, 2)
    state = backend.device_state()
    names = [w.model for w in backend.models.resident()]
    if cuda:
        assert ledger is not None
        out.check("eviction", other.evicted == (model_a,) and other.loaded
                  and names == [model_b] and not state.warm(model_a),
                  f"{model_b} loaded={other.loaded}, evicted={other.evicted}, "
                  f"resident={names}")
        resident = _allocated_mb() - base
        out.figures.update(ledger_weights_mb_b=round(ledger.weights_mb, 2),
                           allocated_mb_b=round(resident, 2))
        out.check("evicted weights freed",
                  close_enough(ledger.weights_mb, resident, LOOSE_MB, LOOSE_SHARE),
                  f"ledger {ledger.weights_mb:.1f} MB ({model_b} only), allocated over "
                  f"baseline {resident:.1f} MB ({model_a}'s {wa} MB would show)")
        out.check("budget kept", ledger.peak_mb <= budget + 1e-6,
                  f"ledger peak {ledger.peak_mb:.1f} MB <= budget {budget:.1f} MB")
    else:
        out.check("eviction", other.loaded and names == [model_b]
                  and state.warm(model_b, "cpu") and not state.warm(model_a, "cpu"),
                  f"{model_b} loaded={other.loaded}, host side now {names}")
        out.info("evicted", "host-side drops are not ledger evictions: "
                 f"CallRecord.evicted={other.evicted}")
    out.check("evicted instance released", _released(instance_a),
              f"{model_a}'s parameters are freed (on the meta device)")
    # 3. close frees everything
    weights_before = ledger.weights_mb if ledger is not None else 0.0
    before_close = _allocated_mb() if cuda else 0.0
    node.close()
    names = [w.model for w in backend.models.resident()]
    out.check("close", names == [] and (ledger is None or ledger.in_use_mb == 0),
              f"resident after close: {names}, ledger in use "
              f"{ledger.in_use_mb if ledger is not None else 0:.1f} MB")
    if cuda:
        freed = before_close - _allocated_mb()
        out.figures.update(freed_by_close_mb=round(freed, 2),
                           ledger_before_close_mb=round(weights_before, 2))
        out.check("close frees the ledger's weights",
                  close_enough(freed, weights_before, TIGHT_MB, TIGHT_SHARE),
                  f"ledger held {weights_before:.1f} MB, close freed {freed:.1f} MB")
    return out


def _instance(backend: Any, model: str, device: str) -> Any:
    """The instance the backend's cache holds for ``model`` (a warm hit, loads nothing)."""
    from langgraph_devsched.suite import suite_models

    handle = next(h for h in suite_models() if h.name == model)
    with backend.models.scope(device):
        return handle.get()


def _released(instance: Any) -> bool:
    """Whether a suite model's instance was released (its parameters on the meta device)."""
    items = instance if isinstance(instance, tuple) else (instance,)
    modules = [x for x in items if hasattr(x, "parameters")]
    return bool(modules) and all(p.device.type == "meta" for m in modules
                                 for p in m.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", choices=("small", "full"), default="full")
    parser.add_argument("--json", type=Path, default=None, help="write the checks here")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        from langgraph_devsched.telemetry import cuda_status

        ok, why = cuda_status(0)
        if not ok:
            print(f"FAIL cuda: no CUDA device ({why}); use --device cpu for the host path")
            return 2
    try:
        out = run_check(args.device, args.size)
    except Exception as exc:  # a crash is a failure with its reason, not a traceback alone
        out = Checks()
        out.check("run", False, f"{type(exc).__name__}: {exc}")
    print(f"residency check ({args.device}, {args.size}): "
          f"{len(out.results) - out.failed} passed, {out.failed} failed; "
          f"figures {json.dumps(out.figures)}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"checks": out.results, "figures": out.figures},
                                        indent=2))
    return 1 if out.failed else 0


if __name__ == "__main__":
    sys.exit(main())
