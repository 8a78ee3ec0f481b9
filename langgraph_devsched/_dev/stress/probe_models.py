"""The resident-models probe: parallel steps on models whose weights do not all fit.

Four models (2,500-4,000 MB of weights each) on an 8,000 MB declared GPU, a step of 2-6 calls
with random options, some of which raise a CUDA OOM or a tool error. A ledger that checks at
every grant and release that it holds exactly the resident weights plus the working memory
of the running calls, never over the budget, and (a `LiveLedger`) that every model instance
the harness's loaders hold is counted and what they really hold fits. Every call answered
once; at rest only weights, and the live instances are the resident models; 0 after
``node.close()``; every instance released once.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    call_within,
    check_answered,
    graph_of,
    make_tool,
    step_input,
    within,
)
from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels
from langgraph_devsched._dev.stress.tools import oom_error
from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.ledger import Reservation, WeightsNeed
from langgraph_devsched.node import DeviceToolNode
from langgraph_devsched.options import DeviceOption

STEP_LIMIT_S = 10.0
WEIGHTS_MB = {"vision": 4000.0, "speech": 3500.0, "text": 2500.0, "ocr": 3000.0}
BUDGET_MB = 8000.0


class CheckedLedger(LiveLedger):
    """A ledger that checks its own invariant at every grant and release (and, as a
    `LiveLedger`, compares itself with the live instances)."""

    def __init__(self, budget_mb: float, models: LiveModels | None = None) -> None:
        super().__init__(budget_mb, models if models is not None else LiveModels())
        self.live: dict[int, float] = {}
        self.models: dict[int, str | None] = {}
        self.problems: list[str] = []

    def _check(self, where: str) -> None:
        expected = self.weights_mb + sum(self.live.values())
        if abs(self.in_use_mb - expected) > 1e-6:
            self.problems.append(f"{where}: ledger {self.in_use_mb:.0f} MB, weights + working "
                                 f"{expected:.0f} MB")
        if self.in_use_mb > self.capacity_mb + 1e-6:
            self.problems.append(f"{where}: {self.in_use_mb:.0f} MB over the budget")

    def _grant_locked(self, mb: float, share: float, need: WeightsNeed | None = None,
                      *, call: bool = True) -> Reservation:
        res = super()._grant_locked(mb, share, need, call=call)
        running = {m for m in self.models.values() if m is not None}
        if set(res.evicted) & running:
            self.problems.append(f"grant: evicted {sorted(set(res.evicted) & running)} while "
                                 "a running call uses it")
        self.live[res.ticket] = mb
        self.models[res.ticket] = res.model
        self._check("grant")
        return res

    def _release_locked(self, reservation: Reservation) -> None:
        if not reservation.released:
            self.live.pop(reservation.ticket, None)
            self.models.pop(reservation.ticket, None)
        super()._release_locked(reservation)
        self._check("release")


def resident_models(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    live = LiveModels()
    handles = {n: live.handle(n, WEIGHTS_MB[n]) for n in WEIGHTS_MB}
    faults: dict[str, str] = {}

    def tool(name: str) -> Any:
        def before(payload: str) -> str:
            instance = handles[name].get()
            fault = faults.get(payload, "none")
            if fault == "gpu_oom" and instance.device != "cpu":
                raise oom_error()
            if fault == "tool_error":
                raise ValueError(f"injected tool error in {name}")
            return f"{name}#{instance.token}@{instance.device}"

        def run(payload: str) -> str:
            return before(payload)

        async def arun(payload: str) -> str:
            await asyncio.sleep(0.001)
            return before(payload)

        return make_tool(f"m_{name}", run, arun)

    backend = LocalBackend(gpu=GpuConfig(BUDGET_MB, device="fake:0"))
    ledger = CheckedLedger(BUDGET_MB, live)
    backend.stand_in_ledger(ledger)  # the probe's checked ledger stands in for the backend's own
    hints = {f"m_{n}": h.hints(vram_mb=600.0, gpu_share=0.4) for n, h in handles.items()}
    rng = ctx.rng
    calls = [(f"r{ctx.index}c{j}", f"m_{rng.choice(sorted(WEIGHTS_MB))}")
             for j in range(rng.randint(2, 6))]
    for cid, _ in calls:
        faults[cid] = rng.choice(["none", "none", "none", "gpu_oom", "tool_error"])
    choices: list[DeviceOption] = ["gpu_now", "gpu_queued", "cpu"]
    options = {cid: rng.choice(choices) for cid, _ in calls}
    from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

    class Drawn(SchedulerBase):
        name = "drawn"

        def decide(self, batch: Batch, view: SchedulerView) -> Decision:
            return self._decision({c.call_id: options[c.call_id] for c in batch.calls}, "drawn")

    node = DeviceToolNode([tool(n) for n in WEIGHTS_MB], hints=hints, backend=backend,
                          scheduler=Drawn(), handle_tool_errors=True)
    graph = graph_of(node)
    ok = True
    for round_ in range(2):  # the second step finds some models warm
        inputs = step_input(calls)
        mode = "async" if rng.random() < 0.5 else "sync"
        result.count(mode)
        if mode == "async":
            out, why = asyncio.run(within(graph.ainvoke(inputs), STEP_LIMIT_S))
        else:
            out, why = call_within(functools.partial(graph.invoke, inputs), STEP_LIMIT_S)
        ok &= result.check(why is None, f"{mode} step {round_}: {why}")
        if why is None:
            ok &= check_answered(result, out, [c for c, _ in calls], f"{mode} step {round_}")
        ok &= result.check(ledger.working_mb <= 1e-6 and ledger.active == 0,
                           f"step {round_}: {ledger.working_mb:.0f} MB working memory at rest")
        resident = sum(w.weights_mb for w in ledger.resident())
        ok &= result.check(abs(ledger.in_use_mb - resident) <= 1e-6,
                           f"step {round_}: ledger {ledger.in_use_mb:.0f} MB at rest, resident "
                           f"weights {resident:.0f} MB")
        for report in list(node.history)[-1:]:
            if report.record is not None:
                result.count("evictions", report.record.evictions)
                result.count("loads", report.record.loads)
        for problem in ledger.at_rest_problems():
            ok = result.check(False, f"step {round_}, at rest: {problem}")
    for problem in [*ledger.problems[:5], *live.problems[:5]]:
        ok = result.check(False, problem)
    node.close()
    ok &= result.check(ledger.in_use_mb <= 1e-6 and not ledger.resident(),
                       f"after close: {ledger.in_use_mb:.0f} MB, {len(ledger.resident())} "
                       "resident")
    left = live.live_gpu_mb()
    ok &= result.check(not left and live.released == live.loads,
                       f"after close: {live.loads} loaded, {live.released} released, GPU "
                       f"instances still live {left}")
    result.case(ok)
    return result
