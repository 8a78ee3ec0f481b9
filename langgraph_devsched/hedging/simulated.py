"""The bench's side of hedges and think time: both runs on the testbed, idle-time runs.

**Hedged steps.** A decision with ``hedges`` runs every hedged call twice in the same step
(`hedging.hedged_calls`): the second run contends for the GPU and the cores like any call,
so what it costs the others is in the figures. `hedging.settle` then answers each hedged
call with the first run to end and stops the loser at its bound; the step's wall time lasts
until the last loser stopped. The testbed itself runs the loser to its end, so the contention
it causes past its stop is charged too: the figures are an upper bound on a hedge's cost.
The noise-free cost (what regret is paid from) is the settled makespan of the noise-free run.

**Think time.** A real agent's tool steps alternate with LLM turns of seconds. Between two
steps the bench gives a scheduler with a ``calibration()`` method (the monitor policy) the
scenario's ``think_ms``: each run it asks for executes alone on the testbed (noise applied,
the clock and the resident models untouched: it only measures), is fed back as a hedge with
no winner (`hedging.HedgeOutcome`, complete or, cut where the next step arrives, censored),
and its device time is reported; it never adds to a step's wall time.

>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40)},
...     vram_budget_mb=8000, noise=0.0)
>>> step = run_hedged_step(bed, [("c1", "fft", "gpu_now")], {"c1": "cpu"}, bound=2.0)
>>> step.record.calls[0].option, step.noise_free_ms, step.unhedged_ms
('cpu', 42.0, 42.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.hedging import HedgeOutcome, hedged_calls, settle
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.protocols import capabilities
from langgraph_devsched.testbed import SimulatedTestbed

Calls = Sequence[tuple[str, str, DeviceOption]]
DEFAULT_THINK_MS = 3000.0
"""A scenario's default think time between steps: an LLM turn of a few seconds."""
MAX_IDLE_RUNS = 8
"""At most this many idle-time runs between two steps."""


@dataclass(frozen=True)
class HedgedStep:
    """One executed step with hedges, as the app saw it."""

    record: StepRecord
    noise_free_ms: float
    """The settled makespan of the noise-free run (the cost regret is paid from)."""
    unhedged_ms: float
    """The noise-free makespan of the same step without its hedges."""


def run_hedged_step(
    bed: SimulatedTestbed, calls: Calls, hedges: Mapping[str, DeviceOption], *,
    bound: float, run: Callable[[list[tuple[str, str, DeviceOption]]], StepRecord] | None = None,
) -> HedgedStep:
    """Run ``calls`` with their ``hedges`` on ``bed`` (``run``: how a step executes, default
    ``bed.run_step``) and settle it; noise-free costs from the state before the step."""
    both = hedged_calls(calls, hedges)
    unhedged = bed.makespan(list(calls))
    noise_free = settle(bed.simulate(both, noisy=False), hedges, bound=bound).makespan_ms
    record = (run or bed.run_step)(both)
    return HedgedStep(settle(record, hedges, bound=bound), noise_free, unhedged)


@dataclass
class IdleRuns:
    """What the idle-time runs between steps did: how many, and their device time."""

    runs: int = 0
    cut: int = 0
    device_ms: float = 0.0


def idle_calibration(
    bed: SimulatedTestbed, scheduler: Any, think_ms: float, observe: Callable[[Any, Any,
                                                                            StepRecord], None],
    totals: IdleRuns, *, max_runs: int = MAX_IDLE_RUNS,
) -> float:
    """Spend ``think_ms`` of idle time on the runs ``scheduler.calibration()`` asks for (a
    ``(batch, decision)`` of one call, or None), each alone on the testbed, fed to
    ``observe(batch, decision, record)``; the last one is cut where the time runs out.
    Returns the idle time the runs left."""
    calibrate = capabilities(scheduler).calibration
    left = think_ms
    for _ in range(max_runs):
        if calibrate is None or left <= 0:
            return max(0.0, left)
        asked = calibrate()
        if asked is None:
            return left
        batch, decision = asked
        (call,) = batch.calls
        option = decision.mapping[call.call_id]
        ran = bed.simulate([(call.call_id, call.tool, option)], noisy=True).calls[0]
        complete = ran.error is None and ran.end_ms <= left
        stop = min(ran.end_ms, left)
        clipped = CallRecord(ran.call_id, ran.tool, ran.option, ran.device, ran.fallback,
                             min(ran.start_ms, stop), stop, ran.vram_reserved_mb,
                             ran.gpu_peers, ran.error, model=ran.model, load_ms=ran.load_ms,
                             loaded=ran.loaded)
        outcome = HedgeOutcome(call.call_id, call.tool, None, clipped, complete, left)
        observe(batch, decision, StepRecord((), 0.0, extra={"hedges": (outcome,)}))
        totals.runs += 1
        totals.cut += int(not complete)
        totals.device_ms += clipped.run_ms
        left -= stop
    return max(0.0, left)
