"""`RuntimeMonitor`: turns executed steps into observations. It never picks a mapping.

The node and the benchmark runner call `record_step` after every step and `snapshot` before
the next decision. A scheduler reads the snapshot (`Observations`); it never records.
Every table is bounded (`MonitorLimits`, keyword arguments of the constructor), and
``snapshot(tools=...)`` costs what those tools hold, not the whole history.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, Decision
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"ocr": ToolParams(cpu_ms=90, gpu_ms=30)}, vram_budget_mb=8000)
>>> batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
>>> mon = RuntimeMonitor()
>>> mon.record_step(batch, Decision({"c1": "gpu_now"}), bed.run_step([("c1", "ocr", "gpu_now")]),
...                 bed.device_state())
>>> obs = mon.snapshot()
>>> obs.estimate("ocr", "gpu_now").run_ms
30.0
>>> [h.text for h in obs.hints]
['`ocr` has never run on the CPU (measured on the GPU only; up to 30 ms to gain)']
>>> mon.snapshot(tools=["asr"]).estimates, mon.sizes().stats
((), 1)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal

from langgraph_devsched.hedging import hedge_outcomes
from langgraph_devsched.monitor.bounds import MonitorLimits, MonitorSizes
from langgraph_devsched.monitor.censored import CensoredTimes
from langgraph_devsched.monitor.context import background_bucket, call_context
from langgraph_devsched.monitor.explore import HintInputs, propose_hints
from langgraph_devsched.monitor.keys import placement_key, shape_key
from langgraph_devsched.monitor.observations import (
    DeviceSnapshot,
    Observations,
    OptionEstimate,
    PlacementOutcome,
)
from langgraph_devsched.monitor.persist import load_file, load_store, save_store, write_file
from langgraph_devsched.monitor.state import (
    KeyStats,
    LastCall,
    LastStep,
    MonitorState,
    OutcomeStats,
    ToolFacts,
)
from langgraph_devsched.monitor.stats import RunningStat
from langgraph_devsched.monitor.tables import Tables
from langgraph_devsched.options import is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.telemetry import DeviceState, TelemetrySource

logger = logging.getLogger(__name__)

STALE_AFTER_STEPS = 50
NOISY_CV = 0.25
PROBE_BUDGET = 4
_DEFAULT_LIMITS = MonitorLimits()


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


class RuntimeMonitor:
    """Running latency statistics per (tool, option, load context), plus exploration hints.

    ``clock`` (seconds, injectable) stamps samples so ages are visible; staleness is counted
    in recorded steps. ``probe_budget`` bounds the probes proposed per (batch shape,
    background load): once that many probes of a shape were recorded, hints say
    ``probes_left=0``. ``telemetry`` (e.g. a `SimulatedTestbed`) supplies the device state
    when `record` is called without one. The ``max_*`` arguments cap the tables (see
    `MonitorLimits`; least recently updated entries go first); a ``state`` handed in (or
    loaded) is trimmed to them. Recording, snapshots and saves hold one lock, so threads may
    share a monitor.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        stale_after_steps: int = STALE_AFTER_STEPS,
        noisy_cv: float = NOISY_CV,
        probe_budget: int = PROBE_BUDGET,
        state: MonitorState | None = None,
        telemetry: TelemetrySource | None = None,
        max_tools: int = _DEFAULT_LIMITS.max_tools,
        max_stats_per_tool: int = _DEFAULT_LIMITS.max_stats_per_tool,
        max_stats: int = _DEFAULT_LIMITS.max_stats,
        max_shapes: int = _DEFAULT_LIMITS.max_shapes,
        max_outcomes_per_shape: int = _DEFAULT_LIMITS.max_outcomes_per_shape,
        max_outcomes: int = _DEFAULT_LIMITS.max_outcomes,
    ) -> None:
        self.clock = clock
        self.telemetry = telemetry
        self.stale_after_steps = stale_after_steps
        self.noisy_cv = noisy_cv
        self.probe_budget = probe_budget
        self.limits = MonitorLimits(
            max_tools=max_tools, max_stats_per_tool=max_stats_per_tool, max_stats=max_stats,
            max_shapes=max_shapes, max_outcomes_per_shape=max_outcomes_per_shape,
            max_outcomes=max_outcomes,
        )
        self._tables = Tables(state if state is not None else MonitorState(), self.limits)
        self.censored = CensoredTimes(max_tools)
        """Hedges' losers cancelled at their bound: per (tool, side), at least how long."""
        self._device: DeviceState | None = None
        self._lock = threading.RLock()
        self._memo_at: tuple[int, float | None] | None = None
        self._memo_estimates: dict[str, tuple[OptionEstimate, ...]] = {}
        self._memo_outcomes: dict[str, tuple[PlacementOutcome, ...]] = {}

    @property
    def state(self) -> MonitorState:
        """Everything the monitor keeps (what `save` writes); read it, do not write it."""
        return self._tables.state

    def sizes(self) -> MonitorSizes:
        """How full each table is; never above `limits`."""
        with self._lock:
            return self._tables.sizes()

    # -- recording -------------------------------------------------------------------------

    def record_step(
        self, batch: Any, decision: Any, step_record: StepRecord, device_state: DeviceState
    ) -> None:
        """Take one executed step: every call's latency under its context, the outcome."""
        with self._lock:
            self._record_step(batch, decision, step_record, device_state)

    def _record_step(
        self, batch: Any, decision: Any, step_record: StepRecord, device_state: DeviceState
    ) -> None:
        tables = self._tables
        st = tables.state
        st.step += 1
        now = self.clock() if self.clock is not None else None
        self._device = device_state
        for call in getattr(batch, "calls", ()):
            spec = call.spec
            profile = spec.profile
            allowed = spec.allowed_options()
            tables.put_tool(call.tool, ToolFacts(
                gpu_allowed=any(is_gpu(o) for o in allowed),
                cpu_allowed="cpu" in allowed,
                declared_cpu_ms=profile.cpu_ms if profile else None,
                declared_gpu_ms=profile.gpu_ms if profile else None,
            ))
        last_calls = []
        speeds = {d.device: d.speed for d in device_state.devices} if len(
            device_state.devices) > 1 else {}
        transfers = {c.tool: c.spec.profile.transfer_ms for c in getattr(batch, "calls", ())
                     if c.spec.profile is not None}
        hedges = hedge_outcomes(step_record)
        for h in hedges:
            if h.censored and h.own_ms > 0:  # cut during its load: nothing learnt
                self.censored.note(h.tool, "gpu" if h.loser.on_gpu else "cpu", h.own_ms)
        losers = {h.loser.call_id for h in hedges if h.complete}
        for rec in (*step_record.calls, *(h.loser for h in hedges if h.complete)):
            if rec.error is not None or not _finite(rec.run_ms, rec.latency_ms):
                continue  # a failed call, or a time that is no measurement
            ctx = call_context(rec, step_record, device_state).key
            device: Literal["gpu", "cpu"] = "gpu" if rec.on_gpu else "cpu"
            if rec.load_ms > 0:  # a cold start: its load is kept apart from the tool's time
                tables.put_load(rec.tool, device, rec.load_ms)
            ks = tables.get_stat(rec.tool, rec.option, ctx) or KeyStats()
            own = _unit_speed(_warm(rec.run_ms, rec), speeds.get(rec.device, 1.0),
                              transfers.get(rec.tool, 0.0))
            run = ks.run.add(own, step=st.step, time=now)
            if run.count < ks.run.count:  # the outlier rule restarted it: the regime changed
                st.resets += 1
                st.last_reset_step = st.step
            tables.put_stat(rec.tool, rec.option, ctx, KeyStats(
                run=run,
                latency=ks.latency.add(_warm(rec.latency_ms, rec) - _warm(rec.run_ms, rec) + own,
                                       step=st.step, time=now),
                device=device,
                fallbacks=ks.fallbacks + (1 if rec.fell_back else 0),
            ))
            if rec.on_gpu:
                tables.put_vram(rec.tool, rec.vram_reserved_mb)
            if rec.call_id in losers:  # a hedge's loser: a measurement, not the step's call
                continue
            last_calls.append(
                LastCall(tool=rec.tool, option=rec.option, device=device, context=ctx,
                         run_ms=own,
                         wait_ms=max(0.0, rec.latency_ms - rec.run_ms))
            )
        if not step_record.calls or not _finite(
            step_record.makespan_ms, *(c.run_ms for c in step_record.calls),
            *(c.latency_ms for c in step_record.calls),
        ):  # an empty step has no shape, a non-finite time no outcome: nothing more to keep
            return
        shape = shape_key(c.tool for c in step_record.calls)
        placement = placement_key((c.tool, c.option) for c in step_record.calls)
        out = st.outcomes.get(f"{shape}|{placement}") or OutcomeStats()
        probe = bool(getattr(decision, "probe", False))
        ordered = sorted(step_record.calls, key=lambda c: (c.tool, c.option))
        runs = out.runs if len(out.runs) == len(ordered) else [RunningStat() for _ in ordered]
        ends = out.ends if len(out.ends) == len(ordered) else [RunningStat() for _ in ordered]
        cold = any(getattr(c, "loaded", False) for c in step_record.calls)
        tables.put_outcome(shape, placement, OutcomeStats(
            makespan=out.makespan.add(step_record.makespan_ms, step=st.step, time=now),
            warm=out.warm if cold else out.warm.add(step_record.makespan_ms, step=st.step,
                                                     time=now),
            probes=out.probes + probe,
            runs=[r.add(_warm(c.run_ms, c), step=st.step)
                  for r, c in zip(runs, ordered, strict=True)],
            ends=[r.add(_warm(c.latency_ms, c), step=st.step)
                  for r, c in zip(ends, ordered, strict=True)],
        ))
        bg = background_bucket(device_state)
        tables.put_last(LastStep(
            shape=shape, placement=placement, bg=bg, calls=last_calls,
            makespan_ms=step_record.makespan_ms,
        ))
        if probe:  # after put_last: a probe budget lives as long as its shape
            tables.add_probe(shape, bg)

    def record(
        self, record: StepRecord, *, batch: Any, decision: Any,
        device_state: DeviceState | None = None,
    ) -> None:
        """`record_step` in the benchmark runner's hook form; the device state comes from
        ``device_state``, else the monitor's ``telemetry`` source, else the last one seen."""
        state = device_state
        if state is None and self.telemetry is not None:
            state = self.telemetry.device_state()
        if state is None:
            state = self._device or DeviceState.cpu_only("no telemetry given to the monitor")
        self.record_step(batch, decision, record, state)

    # -- reading ---------------------------------------------------------------------------

    def probes_left(self, shape: str, bg: str) -> int:
        with self._lock:
            return max(0, self.probe_budget - self._tables.probes_used(shape, bg))

    def snapshot(
        self, batch: Any | None = None, *, tools: Collection[str] | None = None
    ) -> Observations:
        """What was observed; hints refer to ``batch`` (default: the last step).

        With ``tools`` (e.g. the batch's tool names) the snapshot holds only their estimates
        and VRAM, and the outcomes of shapes made only of them, and costs only what they
        hold; without, it holds everything. Estimates are rebuilt once per step and clock
        reading: snapshots taken between two records share them."""
        with self._lock:
            return self._snapshot(batch, tools)

    def _snapshot(self, batch: Any | None, tools: Collection[str] | None) -> Observations:
        if isinstance(tools, str):  # one tool name, not its letters
            tools = (tools,)
        tables = self._tables
        st = tables.state
        now = self.clock() if self.clock is not None else None
        if self._memo_at != (st.step, now):
            self._memo_at = (st.step, now)
            self._memo_estimates.clear()
            self._memo_outcomes.clear()
        names = tables.tools_with_stats() if tools is None else sorted(set(tools))
        estimates = [e for tool in names for e in self._estimates_of(tool, now)]
        outcomes = [o for shape, key in tables.shapes_within(tools)
                    for o in self._outcomes_of(shape, key)]
        if tools is None:
            vram = dict(st.vram_seen_mb)
        else:
            vram = {t: st.vram_seen_mb[t] for t in names if t in st.vram_seen_mb}
        loads = {k: v for k, v in st.load_seen_ms.items()
                 if tools is None or k.rpartition("|")[0] in names}
        device = None
        if self._device is not None:
            d = self._device
            device = DeviceSnapshot(
                gpu_available=d.gpu_available, gpu_name=d.gpu_name,
                vram_budget_mb=d.vram_budget_mb, vram_used_mb=d.vram_used_mb,
                gpu_utilization=d.gpu_utilization, cpu_cores=d.cpu_cores, reason=d.reason,
            )
        inputs = HintInputs(
            tables=tables, stale_after_steps=self.stale_after_steps, noisy_cv=self.noisy_cv,
            probe_budget=self.probe_budget,
            bg=background_bucket(self._device) if self._device is not None else None,
        )
        return Observations(
            step=st.step, epoch=st.resets, drift=st.last_reset_step == st.step,
            device=device, estimates=tuple(estimates), vram_seen_mb=vram, load_seen_ms=loads,
            outcomes=tuple(outcomes), hints=propose_hints(inputs, batch),
        )

    def _estimates_of(self, tool: str, now: float | None) -> tuple[OptionEstimate, ...]:
        memo = self._memo_estimates.get(tool)
        if memo is not None:
            return memo
        step = self._tables.state.step
        built = []
        for option, context, ks in self._tables.stats_of(tool):
            run = ks.run
            steps_since = step - run.last_step
            status: Literal["measured", "noisy", "stale"] = "measured"
            if steps_since > self.stale_after_steps:
                status = "stale"
            elif run.count >= 2 and run.cv > self.noisy_cv:
                status = "noisy"
            built.append(OptionEstimate(
                tool=tool, option=option, context=context, device=ks.device,
                run_ms=run.mean, latency_ms=ks.latency.mean, std_ms=run.std,
                count=run.count, outliers=run.outliers, fallbacks=ks.fallbacks,
                steps_since=steps_since,
                age_s=(now - run.last_time) if now is not None and run.last_time is not None
                else None,
                status=status,
            ))
        self._memo_estimates[tool] = memo = tuple(built)
        return memo

    def _outcomes_of(self, shape: tuple[str, ...], key: str) -> tuple[PlacementOutcome, ...]:
        memo = self._memo_outcomes.get(key)
        if memo is not None:
            return memo
        step = self._tables.state.step
        built = [
            PlacementOutcome(
                shape=shape, placement=placement,
                makespan_ms=out.makespan.mean, std_ms=out.makespan.std,
                warm_ms=out.warm.mean if out.warm.count else None,
                run_ms=tuple(r.mean for r in out.runs),
                latency_ms=tuple(r.mean for r in out.ends),
                count=out.makespan.count, probes=out.probes,
                steps_since=step - out.makespan.last_step,
            )
            for placement, out in sorted(self._tables.placements_of(key), key=lambda p: p[0])
        ]
        self._memo_outcomes[key] = memo = tuple(built)
        return memo

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the stats as a JSON file (see `langgraph_devsched.monitor.persist`)."""
        with self._lock:
            data = self.state.model_dump_json(indent=1).encode("utf-8")
        write_file(data, path)  # the disk outside the lock

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> RuntimeMonitor:
        """A monitor with the stats of ``path``; cold (with a warning) if unreadable. Never
        raises for the file's content."""
        return cls(state=load_file(path), **kwargs)

    def save_to_store(self, store: Any) -> None:
        """Put the stats into a LangGraph `BaseStore` (one JSON item)."""
        with self._lock:
            save_store(self.state, store)

    @classmethod
    def load_from_store(cls, store: Any, **kwargs: Any) -> RuntimeMonitor:
        """A monitor with the stats kept in ``store``; cold (with a warning) if unusable."""
        return cls(state=load_store(store), **kwargs)


def _unit_speed(ms: float, speed: float, transfer_ms: float) -> float:
    """A GPU run's time as on a GPU of speed 1 (several GPUs: a GPU's declared ``speed``
    divides its compute, not the declared copy time), so that samples of one tool on GPUs
    of different speeds pool; speed 1 (one GPU, the CPU): unchanged."""
    if speed == 1.0 or speed <= 0:
        return ms
    copy = min(ms, transfer_ms)
    return copy + (ms - copy) * speed


def _warm(ms: float, rec: Any) -> float:
    """A call's time without the wait for its model to load (the tool's own time)."""
    return max(0.0, ms - getattr(rec, "load_ms", 0.0))
