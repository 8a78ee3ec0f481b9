"""Planning a step: which calls form it, its one decision, and who shares that decision.

A step is the calls of one AIMessage in one graph invocation. When `ToolNode` gets the whole
message, the step is that invocation's alone and is planned without any registry or lock.
When `Send` fans the calls out as separate tasks, the tasks of one superstep share one plan:
they are recognised by their conversation (``thread_id``), the superstep's checkpoint (the
``checkpoint_map`` LangGraph gives every task of one superstep, unique per invocation), and
the calls' ids and tools. Two invocations never share a plan, even when they reuse call ids.

The first task of a shared step decides (a single flight that works across threads and event
loops); the others wait for its plan, or plan themselves if it failed or was cancelled.

Everything a scheduler (or the monitor it reads) returns is untrusted: the decision is
checked by `checked_decision`, and any failure between reading the view and starting the step
falls back to the static hints, so the step is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, get_args

from langchain_core.runnables import RunnableConfig

from langgraph_devsched.decision_trace import (
    aclose_decide_run,
    aopen_decide_run,
    close_decide_run,
    log_decision,
    open_decide_run,
)
from langgraph_devsched.executors.base import Backend, PlannedCall, StepExecution
from langgraph_devsched.gpus import check_gpus, describe_devices
from langgraph_devsched.hedging import HEDGE_BOUND, checked_hedges, hedge_ids, settle
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import (
    Batch,
    Decision,
    Preload,
    Scheduler,
    SchedulerView,
    batch_snapshot,
)
from langgraph_devsched.schedulers.classic.static import StaticHintScheduler, constrained
from langgraph_devsched.schedulers.protocols import async_decide, capabilities, is_blocking
from langgraph_devsched.telemetry import DeviceState, GpuDevice

logger = logging.getLogger(__name__)

StepKey = tuple[str, ...]
_CAUSES: frozenset[str] = frozenset(get_args(FallbackCause))
_MAX_REASON = 2000
MAX_BACKGROUND = 4
"""At most this many of a decision's background loads are checked (the node runs one)."""

_DECIDE_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="devsched-decide")
"""Blocking schedulers decide here under ``ainvoke``, never in the loop's default executor
(where the tools' threads run)."""


@dataclass
class StepReport:
    """One scheduled step: the batch, the decision actually applied, and what happened."""

    batch: Batch
    decision: Decision
    scheduler: str
    fallbacks: dict[str, FallbackCause] = field(default_factory=dict)
    """Per call id, why the applied option differs from the scheduler's answer."""
    record: StepRecord | None = None
    words: dict[str, Any] | None = None
    """The forecast from words in force when the step was planned (`_node.words`: its
    source, latency, predicted tools, and which of the step's tools it predicted, ``hits``,
    and did not, ``misses``); None where the scheduler reads no words or none came yet."""

    @property
    def devices(self) -> dict[str, str]:
        """Per call id, the device it ran on (``cuda:k``, ``cpu``, ``none``); empty until
        the step closed."""
        return {} if self.record is None else {c.call_id: c.device for c in self.record.calls}


@dataclass(eq=False)
class PlannedStep:
    """A decided step in flight: its report, its execution on the backend, its calls."""

    report: StepReport
    execution: StepExecution
    planned: dict[str, PlannedCall]
    key: StepKey | None = None
    finished: bool = False
    streamed_decision: bool = False
    """Its decision was written to the custom stream (`stream_events`)."""
    streamed_outcome: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    ambient_tracing: bool | None = None
    plain: bool = False
    """A lean step (`lean_step`) whose runs nobody observes: the node runs each call as
    `ToolNode` does and the execution books it (``run_plain``)."""
    seconds: dict[str, str] = field(default_factory=dict)
    """The id of each hedged call's second run (`hedging.hedge_ids`: never a call's id)."""
    trace: dict[str, object] = field(default_factory=dict)
    """Step-wide metadata of its calls' traced runs (the loads run before it: `preload`)."""


def shared_step_key(batch: Batch, config: RunnableConfig | None) -> StepKey | None:
    """The key the `Send` tasks of one step share, or None when no superstep identifies them
    (then the step is planned for its caller alone)."""
    configurable = (config or {}).get("configurable") or {}
    checkpoints = configurable.get("checkpoint_map")
    if not isinstance(checkpoints, Mapping) or not checkpoints:
        return None
    thread = configurable.get("thread_id")
    superstep = ";".join(f"{ns}={cid}" for ns, cid in sorted(checkpoints.items()))
    calls = (f"{c.call_id}\x1f{c.tool}" for c in batch.calls)
    return ("" if thread is None else str(thread), superstep, *calls)


# -- pure decision checks ----------------------------------------------------------------------
FORCED = "forced"
"""`Decision.scheduler` of a step the node decided alone (no scheduler consulted)."""


def forced_decision(batch: Batch, gpu: bool | None, scheduler: str) -> Decision | None:
    """The decision when there is none to make: one allowed option per call (hints, or, with
    ``gpu=False``, no GPU and the CPU allowed). ``gpu=None``: telemetry not read yet. No
    scheduler is consulted: its ``scheduler`` is `FORCED` (the node's own scheduler,
    ``scheduler``, still observes the step and is the report's `StepReport.scheduler`)."""
    mapping: dict[str, DeviceOption] = {}
    for call in batch.calls:
        allowed = call.spec.allowed_options()
        if len(allowed) == 1:
            mapping[call.call_id] = allowed[0]
        elif gpu is False and "cpu" in allowed:
            mapping[call.call_id] = "cpu"
        else:
            return None
    reason = "forced: one allowed option per call" + (" (no GPU)" if gpu is False else "")
    return Decision(mapping=mapping, reason=reason, scheduler=FORCED)


class UntrustedDecisionError(TypeError):
    """A scheduler returned something that is not a usable `Decision`."""


def checked_decision(
    batch: Batch, raw: object, gpu: bool, scheduler: str,
    devices: Sequence[GpuDevice] = (),
) -> tuple[Decision, dict[str, FallbackCause]]:
    """A clean `Decision` from a scheduler's answer, with the calls whose option had to be
    replaced (``invalid_decision``: missing, unknown or forbidden by the hints) or whose
    GPU index names none of ``devices`` (then the default rule places them).

    Raises `UntrustedDecisionError` when ``raw`` is not a `Decision` at all.
    """
    if not isinstance(raw, Decision):
        raise UntrustedDecisionError(
            f"scheduler {scheduler} returned {type(raw).__name__}, not a Decision"
        )
    given = raw.mapping if isinstance(raw.mapping, Mapping) else {}
    mapping: dict[str, DeviceOption] = {}
    fallbacks: dict[str, FallbackCause] = {}
    for call in batch.calls:
        option = given.get(call.call_id)
        allowed = call.spec.allowed_options()
        if not isinstance(option, str) or option not in allowed:
            fallbacks[call.call_id] = "invalid_decision"
            logger.warning(
                "scheduler %s gave %r for call %s (%s); allowed: %s; using the hints",
                scheduler,
                option,
                call.call_id,
                call.tool,
                ", ".join(allowed),
            )
            option = constrained(call.spec, call.spec.preferred or "gpu_queued", gpu)
        mapping[call.call_id] = option
    gpus: dict[str, int] = {}
    bad: tuple[str, ...] = ()
    if getattr(raw, "gpus", None):  # several GPUs: the named ones, checked
        gpus, bad = check_gpus(raw.gpus, [c for c, o in mapping.items() if o != "cpu"], devices,
                               {c.call_id: c.spec.gpus for c in batch.calls})
    for call_id in bad:
        fallbacks.setdefault(call_id, "invalid_decision")
        logger.warning("scheduler %s gave GPU %r for call %s; valid: %s; using the default "
                       "rule", scheduler, raw.gpus[call_id], call_id, describe_devices(devices))
    fallback = raw.fallback if raw.fallback in _CAUSES else None
    veto = getattr(raw, "veto", None)
    return Decision(
        mapping=mapping,
        reason=_text(raw.reason),
        predicted_ms=_finite_ms(raw.predicted_ms, mapping),
        probe=raw.probe is True,
        fallback=fallback or ("invalid_decision" if fallbacks else None),
        llm_calls=raw.llm_calls if type(raw.llm_calls) is int and raw.llm_calls >= 0 else 0,
        scheduler=raw.scheduler if isinstance(raw.scheduler, str) else scheduler,
        reused=getattr(raw, "reused", False) is True,
        hedges=checked_hedges(getattr(raw, "hedges", None),
                              {c.call_id: c.spec for c in batch.calls}, mapping, gpu=gpu),
        hedge_bound=_bound(getattr(raw, "hedge_bound", HEDGE_BOUND)),
        gpus=gpus,
        background=_background(getattr(raw, "background", ()), devices, scheduler),
        veto=_text(veto) if isinstance(veto, str) else None,
    ), fallbacks


def _background(value: object, devices: Sequence[GpuDevice], scheduler: str,
                ) -> tuple[Preload, ...]:
    """The loads a decision names beside its step, each checked (a known side, a GPU that
    exists, names as strings, finite figures); the others dropped with a warning."""
    if not isinstance(value, (tuple, list)):
        return ()
    out = []
    for p in value[:MAX_BACKGROUND]:
        ok = isinstance(p, Preload) and isinstance(p.model, str) and p.side in ("gpu", "cpu") and (
            type(p.gpu) is int and (p.side == "cpu" or 0 <= p.gpu < len(devices))) and (
            isinstance(p.evict, tuple) and all(isinstance(m, str) for m in p.evict)) and all(
            isinstance(x, (int, float)) and math.isfinite(x) for x in (p.load_ms, p.worth_ms))
        if ok:
            out.append(p)
        else:
            logger.warning("scheduler %s named a background load %r; valid: a Preload on GPU "
                           "0..%d or the host; not run", scheduler, p, len(devices) - 1)
    return tuple(out)


def _bound(value: object) -> float:
    """A usable hedge bound (a finite number >= 1), else the default."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        math.isfinite(value) and value >= 1.0)
    return float(value) if ok else HEDGE_BOUND  # type: ignore[arg-type]


def _text(value: object) -> str:
    text = value if isinstance(value, str) else ("" if value is None else repr(value))
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def _finite_ms(value: object, calls: Mapping[str, object]) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, float] = {}
    for call_id in calls:
        ms = value.get(call_id)
        if isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms):
            out[call_id] = float(ms)
    return out


# -- the planner ------------------------------------------------------------------------------
class StepPlanner:
    """Decides steps (once per step, shared by its `Send` tasks) and closes them.

    ``on_close`` hooks run once per step, after its last call, with its report and record;
    a failing hook is logged and the step's answers stand.
    """

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        backend: Backend,
        monitor: Any = None,
        on_close: tuple[Callable[[StepReport, StepRecord], None], ...] = (),
        open_steps: int = 256,
    ) -> None:
        self.scheduler = scheduler
        self.backend = backend
        self.monitor = monitor
        self._on_close = on_close
        self._fallback = StaticHintScheduler()
        self._takes_config = capabilities(scheduler).takes_config
        self._snapshot = batch_snapshot(monitor) if monitor is not None else None
        self._open_steps = open_steps
        self._lock = threading.Lock()
        self._steps: OrderedDict[StepKey, PlannedStep] = OrderedDict()
        self._flights: dict[StepKey, Future[PlannedStep]] = {}

    @property
    def open_steps(self) -> int:
        """Shared steps planned and not closed yet (bounded)."""
        return len(self._steps)

    # -- sync -------------------------------------------------------------------------------
    def plan(self, batch: Batch, config: RunnableConfig | None, key: StepKey | None) -> PlannedStep:
        """The plan of the step made of ``batch``: decided here, or fetched when ``key`` is
        shared with tasks that already planned it."""
        if key is None:
            return self._new_step(batch, config, None)
        while True:
            found, flight, lead = self._join(key)
            if found is not None:
                return found
            if lead:
                try:
                    step = self._new_step(batch, config, key)
                except BaseException as exc:
                    self._settle(key, flight, None, exc)
                    raise
                self._settle(key, flight, step, None)
                return step
            try:
                return flight.result()
            except BaseException:  # the leader failed: plan it ourselves
                continue

    # -- async ------------------------------------------------------------------------------
    async def aplan(
        self, batch: Batch, config: RunnableConfig | None, key: StepKey | None
    ) -> PlannedStep:
        """`plan` without blocking the event loop; safe across loops and threads."""
        if key is None:
            return await self._anew_step(batch, config, None)
        while True:
            found, flight, lead = self._join(key)
            if found is not None:
                return found
            if lead:
                try:
                    step = await self._anew_step(batch, config, key)
                except BaseException as exc:  # cancelled included: a waiter takes over
                    self._settle(key, flight, None, exc)
                    raise
                self._settle(key, flight, step, None)
                return step
            try:
                return await asyncio.shield(asyncio.wrap_future(flight))
            except asyncio.CancelledError:
                raise
            except BaseException:
                continue

    # -- single flight ----------------------------------------------------------------------
    def _join(self, key: StepKey) -> tuple[PlannedStep | None, Future[PlannedStep], bool]:
        with self._lock:
            step = self._steps.get(key)
            if step is not None:
                return step, Future(), False
            flight = self._flights.get(key)
            if flight is not None:
                return None, flight, False
            flight = self._flights[key] = Future()
            return None, flight, True

    def _settle(
        self,
        key: StepKey,
        flight: Future[PlannedStep],
        step: PlannedStep | None,
        exc: BaseException | None,
    ) -> None:
        """Publish the leader's plan (or its failure) to the tasks waiting on ``flight``."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
            if step is not None:
                self._steps[key] = step
                while len(self._steps) > self._open_steps:
                    self._steps.popitem(last=False)
        if step is not None:
            flight.set_result(step)
        else:
            flight.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))

    # -- deciding -----------------------------------------------------------------------------
    def _new_step(
        self, batch: Batch, config: RunnableConfig | None, key: StepKey | None
    ) -> PlannedStep:
        forced = forced_decision(batch, None, self.scheduler.name)  # no telemetry, no torch
        if forced is not None:
            return self._start(batch, forced, {}, key)
        view: SchedulerView | None = None
        run = None
        try:
            view = self._view(batch)
            decision = forced_decision(batch, view.device.gpu_available, self.scheduler.name)
            if decision is None:
                config, run = open_decide_run(batch, view, config)
                decision = self._decide(batch, view, config)
            step = self._checked_start(batch, decision, view, key)
        except Exception as exc:
            step = self._fallback_step(batch, view, exc, key)
        with contextlib.suppress(Exception):  # tracing must not lose the step
            close_decide_run(run, step.report.decision)
        log_decision(self.scheduler.name, step.report.decision)
        return step

    async def _anew_step(
        self, batch: Batch, config: RunnableConfig | None, key: StepKey | None
    ) -> PlannedStep:
        forced = forced_decision(batch, None, self.scheduler.name)
        if forced is not None:
            return self._start(batch, forced, {}, key)
        view: SchedulerView | None = None
        run = None
        try:
            view = self._view(batch)
            decision = forced_decision(batch, view.device.gpu_available, self.scheduler.name)
            if decision is None:
                config, run = await aopen_decide_run(batch, view, config)
                decision = await self._adecide(batch, view, config)
            step = self._checked_start(batch, decision, view, key)
        except Exception as exc:
            step = self._fallback_step(batch, view, exc, key)
        with contextlib.suppress(Exception):  # tracing must not lose the step
            await aclose_decide_run(run, step.report.decision)
        log_decision(self.scheduler.name, step.report.decision)
        return step

    def _view(self, batch: Batch) -> SchedulerView:
        observations = self._snapshot(batch) if self._snapshot is not None else None
        return SchedulerView(device=self.backend.device_state(), observations=observations)

    def _decide(self, batch: Batch, view: SchedulerView, config: RunnableConfig | None) -> Any:
        if config is not None and self._takes_config:
            return self.scheduler.decide(batch, view, config=config)  # type: ignore[call-arg]
        return self.scheduler.decide(batch, view)

    async def _adecide(
        self, batch: Batch, view: SchedulerView, config: RunnableConfig | None
    ) -> Any:
        adecide = async_decide(self.scheduler)
        if adecide is not None:
            if config is not None and self._takes_config:
                return await adecide(batch, view, config=config)
            return await adecide(batch, view)
        if is_blocking(self.scheduler):
            loop = asyncio.get_running_loop()
            ctx = contextvars.copy_context()
            return await loop.run_in_executor(
                _DECIDE_THREADS, ctx.run, self._decide, batch, view, config
            )
        return self._decide(batch, view, config)

    def _checked_start(
        self, batch: Batch, raw: object, view: SchedulerView, key: StepKey | None
    ) -> PlannedStep:
        decision, fallbacks = checked_decision(
            batch, raw, view.device.gpu_available, self.scheduler.name, view.devices
        )
        if decision.fallback == "scheduler_error":
            fallbacks = dict.fromkeys(batch.call_ids, "scheduler_error")
        return self._start(batch, decision, fallbacks, key)

    def _fallback_step(
        self, batch: Batch, view: SchedulerView | None, exc: BaseException, key: StepKey | None
    ) -> PlannedStep:
        logger.warning("scheduler %s failed (%s); using static hints", self.scheduler.name, exc)
        if view is None:
            try:
                device = self.backend.device_state()
            except Exception:
                device = DeviceState.cpu_only("telemetry failed")
            view = SchedulerView(device=device)
        base = self._fallback.decide(batch, view)
        decision = Decision(
            mapping=base.mapping,
            reason=_text(f"scheduler error: {type(exc).__name__}: {exc}"),
            fallback="scheduler_error",
            scheduler=self.scheduler.name,
        )
        return self._start(batch, decision, dict.fromkeys(batch.call_ids, "scheduler_error"), key)

    def plan_lean(self, batch: Batch) -> PlannedStep | None:
        """The plan of a step of plain calls (`lean_step`): forced to the CPU, run by a
        `LeanExecution` on the local backend; None when the hints leave a choice."""
        from langgraph_devsched._node.lean_step import LeanExecution

        forced = forced_decision(batch, None, self.scheduler.name)
        if forced is None:
            return None
        planned = {c.call_id: PlannedCall(c.call_id, c.tool, "cpu", c.spec) for c in batch.calls}
        execution = LeanExecution(list(planned.values()), self.backend)  # type: ignore[arg-type]
        report = StepReport(batch, forced, self.scheduler.name, {})
        return PlannedStep(report, execution, planned, None)

    def _start(
        self,
        batch: Batch,
        decision: Decision,
        fallbacks: dict[str, FallbackCause],
        key: StepKey | None,
    ) -> PlannedStep:
        planned = {
            c.call_id: PlannedCall(c.call_id, c.tool, decision.mapping[c.call_id], c.spec,
                                   decision.gpus.get(c.call_id))
            for c in batch.calls
        }
        seconds = hedge_ids(planned, [c for c in batch.call_ids if c in decision.hedges]
                            ) if decision.hedges else {}
        for c in batch.calls:  # a hedged call's second run (`hedging`): a call of its own
            if c.call_id in seconds:
                second = seconds[c.call_id]
                planned[second] = PlannedCall(second, c.tool, decision.hedges[c.call_id],
                                              c.spec)
        execution = self.backend.start_step(list(planned.values()))
        report = StepReport(batch, decision, self.scheduler.name, fallbacks)
        return PlannedStep(report, execution, planned, key, seconds=seconds)

    # -- closing ------------------------------------------------------------------------------
    def close(self, step: PlannedStep | None) -> StepReport | None:
        """Close ``step`` once all its calls have answered (once): its record, then the
        ``on_close`` hooks. Returns its report when this call closed it."""
        if step is None or not step.execution.done:
            return None
        with step.lock:
            if step.finished:
                return None
            step.finished = True
        if step.key is not None:
            with self._lock:
                if self._steps.get(step.key) is step:
                    del self._steps[step.key]
        decision = step.report.decision
        record = settle(step.execution.record(), decision.hedges, bound=decision.hedge_bound,
                        seconds=step.seconds)
        step.report.record = record
        for hook in self._on_close:
            try:
                hook(step.report, record)
            except Exception:
                logger.exception("post-step hook %s failed; the step's answers stand", hook)
        return step.report
