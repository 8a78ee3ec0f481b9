"""`RuntimeMonitor`: turns executed steps into observations. It never picks a mapping.

The node and the benchmark runner call `record_step` after every step and `snapshot` before
the next decision. A scheduler reads the snapshot (`Observations`); it never records.

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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from langgraph_devsched.monitor.context import background_bucket, call_context
from langgraph_devsched.monitor.explore import propose_hints
from langgraph_devsched.monitor.observations import (
    DeviceSnapshot,
    Observations,
    OptionEstimate,
    PlacementOutcome,
)
from langgraph_devsched.monitor.state import (
    KeyStats,
    LastCall,
    LastStep,
    MonitorState,
    OutcomeStats,
    ToolFacts,
    parse_placement,
    placement_key,
    shape_key,
    stats_key,
)
from langgraph_devsched.monitor.stats import RunningStat
from langgraph_devsched.options import is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.telemetry import DeviceState, TelemetrySource

logger = logging.getLogger(__name__)

STALE_AFTER_STEPS = 50
NOISY_CV = 0.25
PROBE_BUDGET = 4


class RuntimeMonitor:
    """Running latency statistics per (tool, option, load context), plus exploration hints.

    ``clock`` (seconds, injectable) stamps samples so ages are visible; staleness is counted
    in recorded steps. ``probe_budget`` bounds the probes proposed per (batch shape,
    background load): once that many probes of a shape were recorded, hints say
    ``probes_left=0``. ``telemetry`` (e.g. a `SimulatedTestbed`) supplies the device state
    when `record` is called without one.
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
    ) -> None:
        self.clock = clock
        self.telemetry = telemetry
        self.stale_after_steps = stale_after_steps
        self.noisy_cv = noisy_cv
        self.probe_budget = probe_budget
        self.state = state or MonitorState()
        self._device: DeviceState | None = None

    # -- recording -------------------------------------------------------------------------

    def record_step(
        self, batch: Any, decision: Any, step_record: StepRecord, device_state: DeviceState
    ) -> None:
        """Take one executed step: every call's latency under its context, the outcome."""
        st = self.state
        st.step += 1
        now = self.clock() if self.clock is not None else None
        self._device = device_state
        for call in getattr(batch, "calls", ()):
            spec = call.spec
            profile = spec.profile
            st.tools[call.tool] = ToolFacts(
                gpu_allowed=any(is_gpu(o) for o in spec.allowed_options()),
                cpu_allowed="cpu" in spec.allowed_options(),
                declared_cpu_ms=profile.cpu_ms if profile else None,
                declared_gpu_ms=profile.gpu_ms if profile else None,
            )
        last_calls = []
        for rec in step_record.calls:
            if rec.error is not None:
                continue
            ctx = call_context(rec, step_record, device_state).key
            device: Literal["gpu", "cpu"] = "gpu" if rec.on_gpu else "cpu"
            key = stats_key(rec.tool, rec.option, ctx)
            ks = st.stats.get(key) or KeyStats()
            run = ks.run.add(rec.run_ms, step=st.step, time=now)
            if run.count < ks.run.count:  # the outlier rule restarted it: the regime changed
                st.resets += 1
                st.last_reset_step = st.step
            st.stats[key] = KeyStats(
                run=run,
                latency=ks.latency.add(rec.latency_ms, step=st.step, time=now),
                device=device,
                fallbacks=ks.fallbacks + (1 if rec.fell_back else 0),
            )
            if rec.on_gpu:
                seen = st.vram_seen_mb.get(rec.tool, 0.0)
                st.vram_seen_mb[rec.tool] = max(seen, rec.vram_reserved_mb)
            last_calls.append(
                LastCall(tool=rec.tool, option=rec.option, device=device, context=ctx,
                         run_ms=rec.run_ms, wait_ms=max(0.0, rec.latency_ms - rec.run_ms))
            )
        shape = shape_key(c.tool for c in step_record.calls)
        placement = placement_key((c.tool, c.option) for c in step_record.calls)
        okey = f"{shape}|{placement}"
        out = st.outcomes.get(okey) or OutcomeStats()
        probe = bool(getattr(decision, "probe", False))
        ordered = sorted(step_record.calls, key=lambda c: (c.tool, c.option))
        runs = out.runs if len(out.runs) == len(ordered) else [RunningStat() for _ in ordered]
        ends = out.ends if len(out.ends) == len(ordered) else [RunningStat() for _ in ordered]
        st.outcomes[okey] = OutcomeStats(
            makespan=out.makespan.add(step_record.makespan_ms, step=st.step, time=now),
            probes=out.probes + probe,
            runs=[r.add(c.run_ms, step=st.step) for r, c in zip(runs, ordered, strict=True)],
            ends=[r.add(c.latency_ms, step=st.step) for r, c in zip(ends, ordered, strict=True)],
        )
        bg = background_bucket(device_state)
        if probe:
            bkey = f"{shape}@{bg}"
            st.probes_used[bkey] = st.probes_used.get(bkey, 0) + 1
        st.last[shape] = LastStep(
            shape=shape, placement=placement, bg=bg, calls=last_calls,
            makespan_ms=step_record.makespan_ms,
        )
        st.last_shape = shape

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
        return max(0, self.probe_budget - self.state.probes_used.get(f"{shape}@{bg}", 0))

    def snapshot(self, batch: Any | None = None) -> Observations:
        """Everything observed so far; hints refer to ``batch`` (default: the last step)."""
        st = self.state
        estimates = []
        now = self.clock() if self.clock is not None else None
        for key, ks in sorted(st.stats.items()):
            tool, option, ctx = key.split("|")
            run = ks.run
            steps_since = st.step - run.last_step
            status = "measured"
            if steps_since > self.stale_after_steps:
                status = "stale"
            elif run.count >= 2 and run.cv > self.noisy_cv:
                status = "noisy"
            estimates.append(
                OptionEstimate(
                    tool=tool, option=option, context=ctx, device=ks.device,  # type: ignore[arg-type]
                    run_ms=run.mean, latency_ms=ks.latency.mean, std_ms=run.std,
                    count=run.count, outliers=run.outliers, fallbacks=ks.fallbacks,
                    steps_since=steps_since,
                    age_s=(now - run.last_time) if now is not None and run.last_time is not None
                    else None,
                    status=status,  # type: ignore[arg-type]
                )
            )
        outcomes = []
        for key, out in sorted(st.outcomes.items()):
            shape, _, placement = key.partition("|")
            outcomes.append(
                PlacementOutcome(
                    shape=tuple(shape.split(",")), placement=parse_placement(placement),
                    makespan_ms=out.makespan.mean, std_ms=out.makespan.std,
                    run_ms=tuple(r.mean for r in out.runs),
                    latency_ms=tuple(r.mean for r in out.ends),
                    count=out.makespan.count, probes=out.probes,
                    steps_since=st.step - out.makespan.last_step,
                )
            )
        device = None
        if self._device is not None:
            d = self._device
            device = DeviceSnapshot(
                gpu_available=d.gpu_available, gpu_name=d.gpu_name,
                vram_budget_mb=d.vram_budget_mb, vram_used_mb=d.vram_used_mb,
                gpu_utilization=d.gpu_utilization, cpu_cores=d.cpu_cores, reason=d.reason,
            )
        obs = Observations(
            step=st.step, epoch=st.resets, drift=st.last_reset_step == st.step,
            device=device, estimates=tuple(estimates),
            vram_seen_mb=dict(st.vram_seen_mb), outcomes=tuple(outcomes),
        )
        hints = propose_hints(self, obs, batch)
        return obs.model_copy(update={"hints": hints})

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the stats as a JSON file (see `langgraph_devsched.monitor.persist`)."""
        from langgraph_devsched.monitor.persist import save_file

        save_file(self.state, path)

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> RuntimeMonitor:
        """A monitor with the stats of ``path``; cold (with a warning) if unreadable."""
        from langgraph_devsched.monitor.persist import load_file

        return cls(state=load_file(path), **kwargs)

    def save_to_store(self, store: Any) -> None:
        """Put the stats into a LangGraph `BaseStore` (one JSON item)."""
        from langgraph_devsched.monitor.persist import save_store

        save_store(self.state, store)

    @classmethod
    def load_from_store(cls, store: Any, **kwargs: Any) -> RuntimeMonitor:
        """A monitor with the stats kept in ``store``; cold (with a warning) if unusable."""
        from langgraph_devsched.monitor.persist import load_store

        return cls(state=load_store(store), **kwargs)
