"""Drive `DeviceToolNode` with random steps and injected faults; check what must always hold.

Each step sends 1-``max_parallel`` parallel tool calls (one AIMessage) through a compiled
graph, sync (``invoke``) or async (``ainvoke``), on the simulated testbed or on a
`LocalBackend` with a declared `GpuConfig` (real threads, the real `VramLedger`). After every
step the harness checks: one answer per call id, answers match their calls, the applied
options are allowed by each tool's hints, the ledger is within budget and at zero at rest, and
each injected fault ended the way it should (see `EXPECTED`).

>>> report = run_stress(StressConfig(calls=40, seed=3, backend="simulated"))
>>> report.calls, report.lost, report.duplicated, report.ok
(40, 0, 0, True)
"""

from __future__ import annotations

import asyncio
import json
import pickle
import random
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import BaseModel, ConfigDict, Field, model_validator

from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.ledger import VramLedger
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.monitor.state import FORMAT_NAME, FORMAT_VERSION
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.stress.faults import (
    CALL_FAULTS,
    DEFAULT_RATES,
    FAULT_KINDS,
    STEP_FAULTS,
    StepFault,
    Tally,
)
from langgraph_devsched.stress.report import FaultFigures, LedgerFigures, StressReport
from langgraph_devsched.stress.schedulers import LLM_FAULTS, FaultyScheduler, invalid_applied
from langgraph_devsched.stress.tools import (
    TOOL_HINTS,
    TOOL_NAMES,
    TOOL_PARAMS,
    VRAM_BUDGET_MB,
    Toolbox,
)
from langgraph_devsched.testbed import SimulatedTestbed

BackendChoice = Literal["simulated", "local", "both"]
BACKEND_CHOICES: tuple[str, ...] = get_args(BackendChoice)
STEP_LIMIT_S = 30.0
"""No step may take longer than this (a hang in the node itself ends the run as a violation)."""

EXPECTED: dict[str, str] = {
    "tool_error": "error ToolMessage naming the injected error",
    "gpu_oom": "rerun on the CPU (fallback oom), or a clear error where the CPU is forbidden",
    "slow": "its normal answer",
    "hang": "error ToolMessage from the harness's call timeout",
    "bad_call": "error ToolMessage (unknown tool or invalid arguments)",
    "cancel": "no answer, ledger back to 0; the retried step answers every call once",
    "scheduler_error": "every call takes the static hints (fallback scheduler_error)",
    "invalid_decision": "bad options replaced from the hints (fallback invalid_decision)",
    "llm_garbage": "agentic answer repaired or replaced; a valid mapping",
    "llm_error": "agentic falls back (llm_error, step fallback scheduler_error)",
    "llm_hang": "agentic times out (timeout, step fallback scheduler_error)",
    "corrupt_stats": "monitor loads cold with a MonitorStatsWarning; round trip exact",
}


class StressConfig(BaseModel):
    """What one stress run does (the ``devsched stress`` options)."""

    model_config = ConfigDict(extra="forbid")

    calls: int = Field(default=1000, ge=1, description="tool calls to send in all")
    seed: int = 0
    backend: BackendChoice = "both"
    rates: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_RATES))
    max_seconds: float = Field(default=540.0, gt=0, description="stop sending new steps after this")
    max_parallel: int = Field(default=16, ge=1, le=64, description="most calls in one step")
    call_timeout_s: float = Field(
        default=0.02, gt=0, description="harness timeout for hanging tools"
    )
    llm_timeout_s: float = Field(default=0.1, gt=0, description="agentic scheduler timeout")
    queue_timeout_s: float = Field(default=0.05, gt=0, description="local GPU queue timeout")

    @model_validator(mode="after")
    def _rates_valid(self) -> StressConfig:
        unknown = sorted(set(self.rates) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(
                f"unknown fault kind(s) {', '.join(unknown)}; valid kinds: {', '.join(FAULT_KINDS)}"
            )
        for group, kinds in (("call", CALL_FAULTS), ("step", STEP_FAULTS)):
            total = sum(self.rates.get(k, 0.0) for k in kinds)
            if total > 1.0 + 1e-9:
                raise ValueError(
                    f"{group} fault rates sum to {total:g} > 1 ({', '.join(kinds)}): "
                    "at most one fault hits a call or a step"
                )
        return self


def _garbage_files() -> list[bytes]:
    good = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
    return [
        b"\xff\xfe\x00\x81 not text",
        b'{"format": "' + FORMAT_NAME.encode() + b'", "version": ',
        b"[1, 2, 3]",
        b"",
        json.dumps({**good, "format": "something-else"}).encode(),
        json.dumps({**good, "version": 999}).encode(),
        json.dumps({**good, "step": "many", "stats": [1]}).encode(),
        pickle.dumps({"step": 5, "stats": {}}),
    ]


@dataclass
class _Lane:
    """One node and what the harness watches on it."""

    name: str
    node: DeviceToolNode
    graph: Any
    scheduler: FaultyScheduler
    ledger: VramLedger | None
    figures: LedgerFigures
    reports: list[StepReport] = field(default_factory=list)


class _Run:
    def __init__(self, config: StressConfig, stats_dir: Path) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.faults = Tally()
        self.counts = Tally()
        self.violation_examples: list[str] = []
        self.violations = 0
        self.stats_path = stats_dir / "monitor_stats.json"
        self.toolbox = Toolbox(call_timeout_s=config.call_timeout_s)
        names = ("simulated", "local") if config.backend == "both" else (config.backend,)
        self.lanes = [self._lane(name, i) for i, name in enumerate(names)]
        self.calls = self.answered = self.lost = self.duplicated = self.stray = 0
        self.error_answers = self.steps = 0

    # -- set-up --------------------------------------------------------------------------------
    def _lane(self, name: str, index: int) -> _Lane:
        seed = self.config.seed * 10 + index
        scheduler = FaultyScheduler(
            seed=seed, tally=self.faults, llm_timeout_s=self.config.llm_timeout_s
        )
        reports: list[StepReport] = []
        ledger: VramLedger | None = None
        common: dict[str, Any] = {
            "hints": TOOL_HINTS,
            "scheduler": scheduler,
            "monitor": RuntimeMonitor(),
            "on_step": reports.append,
            "handle_tool_errors": True,
        }
        if name == "simulated":
            bed = SimulatedTestbed(
                TOOL_PARAMS, vram_budget_mb=VRAM_BUDGET_MB, cpu_cores=8, seed=seed
            )
            node = DeviceToolNode(self.toolbox.tools(), testbed=bed, **common)
        else:
            backend = LocalBackend(
                gpu=GpuConfig(vram_budget_mb=VRAM_BUDGET_MB),
                cpu_workers=4,
                queue_timeout_s=self.config.queue_timeout_s,
            )
            ledger = backend.ledger
            node = DeviceToolNode(self.toolbox.tools(), backend=backend, **common)
        graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
        figures = LedgerFigures(backend=name, budget_mb=VRAM_BUDGET_MB)
        return _Lane(name, node, graph, scheduler, ledger, figures, reports)

    def violation(self, text: str) -> None:
        self.violations += 1
        if len(self.violation_examples) < 20:
            self.violation_examples.append(text)

    def _draw(self, kinds: tuple[str, ...]) -> str | None:
        u, acc = self.rng.random(), 0.0
        for kind in kinds:
            acc += self.config.rates.get(kind, 0.0)
            if u < acc:
                return kind
        return None

    # -- one step ------------------------------------------------------------------------------
    def _calls(
        self, index: int, n: int, lane: _Lane
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        calls: list[dict[str, Any]] = []
        planned: dict[str, str] = {}
        for i in range(n):
            cid = f"s{index}c{i}"
            tool = self.rng.choice(TOOL_NAMES)
            fault = self._draw(CALL_FAULTS) or "none"
            if fault == "gpu_oom" and lane.ledger is None:
                fault = "none"  # the simulated GPU has no torch: OOM comes from the simulation
            args: dict[str, Any] = {"payload": cid, "fault": fault}
            if fault == "bad_call":
                variant = self.rng.randrange(3)
                if variant == 0:
                    tool = f"no_such_tool_{i}"
                elif variant == 1:
                    args = {"fault": "none"}
                else:
                    args = {"payload": {"nested": [1, 2]}, "fault": "none"}
            calls.append({"name": tool, "args": args, "id": cid, "type": "tool_call"})
            planned[cid] = fault
        return calls, planned

    async def step(self, index: int, n: int) -> None:
        lane = self.rng.choice(self.lanes)
        fault: StepFault | None = self._draw(STEP_FAULTS)  # type: ignore[assignment]
        if fault == "corrupt_stats":
            self._corrupt_stats(lane)
            fault = None
        is_async = fault == "cancel" or self.rng.random() < 0.5
        calls, planned = self._calls(index, n, lane)
        target = self._block_target(calls, planned) if fault == "cancel" else None
        lane.scheduler.arm(None if fault == "cancel" else fault)
        self.counts.add("async_steps" if is_async else "sync_steps")
        before = len(lane.reports)
        inputs = {"messages": [AIMessage("", tool_calls=calls)]}
        try:
            if target is not None:
                out = await self._cancelled_then_retried(lane, inputs, calls, target)
            elif is_async:
                out = await asyncio.wait_for(lane.graph.ainvoke(inputs), STEP_LIMIT_S)
            else:
                out = await asyncio.wait_for(
                    asyncio.to_thread(lane.graph.invoke, inputs), STEP_LIMIT_S
                )
        finally:
            lane.scheduler.release()
        if target is not None:
            planned[target] = "none"  # the retry ran it normally
        self.steps += 1
        lane.figures.steps += 1
        self._check_answers(calls, planned, out["messages"][1:], lane=lane.name)
        batch = any(c["name"] in TOOL_NAMES for c in calls)
        self._check_reports(lane, lane.reports[before:], batch=batch, cancelled=target is not None)
        self._check_ledger_at_rest(lane, f"after step {index}")

    def _block_target(self, calls: list[dict[str, Any]], planned: dict[str, str]) -> str | None:
        """Pick a well-formed call of a tool that can always run, to block until cancelled."""
        targets = [
            c for c in calls
            if c["name"] in TOOL_NAMES and planned[c["id"]] == "none"
            and TOOL_HINTS[c["name"]].get("cpu_allowed", True)
        ]
        if not targets:
            self.counts.add("cancel_without_target")
            return None
        target = self.rng.choice(targets)
        target["args"]["fault"] = "block"
        planned[target["id"]] = "block"
        return str(target["id"])

    async def _cancelled_then_retried(
        self, lane: _Lane, inputs: dict[str, Any], calls: list[dict[str, Any]], target: str
    ) -> dict[str, Any]:
        started = asyncio.Event()
        self.toolbox.block_started = started
        task = asyncio.ensure_future(lane.graph.ainvoke(inputs))
        waiter = asyncio.ensure_future(started.wait())
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=STEP_LIMIT_S, return_when=asyncio.FIRST_COMPLETED
        )
        self.toolbox.block_started = None
        with self.toolbox.lock:
            self.toolbox.released.add(target)
        if waiter not in done:
            waiter.cancel()
            self.violation(f"blocked call {target} never started")
            return await asyncio.wait_for(task, STEP_LIMIT_S)
        task.cancel()
        try:
            await task
            self.violation("a cancelled graph run returned instead of raising CancelledError")
        except asyncio.CancelledError:
            pass
        self.faults.add("cancel")
        if not self._ledger_zero(lane):
            self.counts.add("ledger_busy_right_after_cancel")
            for _ in range(100):  # let cancelled children finish their cleanup (bounded)
                await asyncio.sleep(0.001)
                if self._ledger_zero(lane):
                    break
        at_rest = self._check_ledger_at_rest(lane, "after a cancellation")
        out: dict[str, Any] = await asyncio.wait_for(lane.graph.ainvoke(inputs), STEP_LIMIT_S)
        answers = [m for m in out["messages"][1:] if isinstance(m, ToolMessage)]
        if at_rest and sorted(m.tool_call_id for m in answers) == sorted(c["id"] for c in calls):
            self.counts.add("handled:cancel")
        return out

    # -- checks --------------------------------------------------------------------------------
    def _check_answers(
        self, calls: list[dict[str, Any]], planned: dict[str, str], messages: list[Any],
        *, lane: str = "",
    ) -> None:
        self.calls += len(calls)
        by_id: dict[str, list[ToolMessage]] = {}
        for m in messages:
            if not isinstance(m, ToolMessage):
                self.violation(f"unexpected output message {type(m).__name__}")
                continue
            if m.tool_call_id not in planned:
                self.stray += 1
                self.violation(f"answer for unknown id {m.tool_call_id!r}")
                continue
            by_id.setdefault(m.tool_call_id, []).append(m)
        for call in calls:
            cid = call["id"]
            got = by_id.get(cid, [])
            if not got:
                self.lost += 1
                self.violation(f"call {cid} ({call['name']}, {planned[cid]}) got no answer")
                continue
            self.answered += 1
            self.duplicated += len(got) - 1
            if len(got) > 1:
                self.violation(f"call {cid} got {len(got)} answers")
            self._check_content(call, planned[cid], got[0], lane)

    def _check_content(
        self, call: dict[str, Any], fault: str, m: ToolMessage, lane: str = ""
    ) -> None:
        text = str(m.content)
        error = m.status == "error"
        self.error_answers += error
        cid, tool = call["id"], call["name"]
        fired = "bad_call" if fault == "bad_call" else self.toolbox.fired.get(cid)
        gpu_only = not TOOL_HINTS.get(tool, {}).get("cpu_allowed", True)
        ok: bool
        if fired == "bad_call":
            ok = error
        elif fired == "tool_error":
            ok = error and "injected tool error" in text
        elif fired == "hang":
            ok = error and "did not answer within" in text
        elif fired == "gpu_oom":
            if gpu_only:
                ok = error and "out of gpu memory" in text.lower()
            else:
                ok = not error and text == f"{tool}:{cid}@cpu"
        elif error:
            # only a GPU-only tool may fail to be placed (its VRAM does not fit, no CPU)
            ok = gpu_only and "cannot run" in text
            self.counts.add("placement_errors")
        else:
            ok = text.startswith(f"{tool}:{cid}@")
            if gpu_only and text.endswith("@cpu"):
                # the simulated testbed reruns an OOM on the CPU whatever the hints say
                self.counts.add(f"cpu_forbidden_ran_on_cpu:{lane}")
        if fired is not None and fired == fault:
            self.faults.add(fault)
            if ok:
                self.counts.add(f"handled:{fault}")
        if not ok:
            self.violation(f"call {cid} ({tool}, fault {fault}): unexpected answer {text[:160]!r}")

    def _check_reports(
        self, lane: _Lane, reports: list[StepReport], *, batch: bool, cancelled: bool
    ) -> None:
        """The step's report(s): a cancelled step whose calls had all started is closed
        (and reported) by the cancellation; its retry is planned and reported afresh."""
        if len(reports) > (2 if cancelled else 1):
            self.violation(f"{len(reports)} step reports for one step")
        if not reports:
            if batch:
                self.violation(
                    f"{lane.name} step never closed (no StepReport); fault {lane.scheduler.fired}"
                )
            return
        if cancelled and len(reports) == 2:
            self.counts.add("cancelled_steps_reported")
        for report in reports:
            self._check_report(lane, report)
        self._check_step_fault(lane, reports[-1])

    def _check_report(self, lane: _Lane, report: StepReport) -> None:
        bad = invalid_applied(report.batch, report.decision)
        if bad:
            self.violation(f"applied options outside the hints: {bad}")
        for cause in report.fallbacks.values():
            self.counts.add(f"fallback:{cause}")
        record = report.record
        if record is not None:
            for rec in record.calls:
                if rec.fallback is not None:
                    self.counts.add(f"fallback:{rec.fallback}")
            if lane.ledger is None:
                lane.figures.peak_mb = max(lane.figures.peak_mb, record.vram_peak_mb)
                end = float(record.extra.get("vram_end_mb", 0.0))  # type: ignore[arg-type]
                lane.figures.end_mb = end
                if record.vram_peak_mb > VRAM_BUDGET_MB + 1e-6 or abs(end) > 1e-6:
                    self.violation(f"simulated ledger: peak {record.vram_peak_mb}, end {end}")

    def _check_step_fault(self, lane: _Lane, report: StepReport) -> None:
        fired = lane.scheduler.fired
        if fired is None:
            return
        decision, causes = report.decision, set(report.fallbacks.values())
        agentic = lane.scheduler.agentic
        if fired in LLM_FAULTS:
            for cause in agentic.last_fallbacks.values():
                self.counts.add(f"agentic:{cause}")
        checks: dict[str, Callable[[], bool]] = {
            "scheduler_error": lambda: causes == {"scheduler_error"}
            and len(report.fallbacks) == len(report.batch),
            "invalid_decision": lambda: "invalid_decision" in causes,
            "llm_error": lambda: decision.fallback == "scheduler_error"
            and set(agentic.last_fallbacks.values()) == {"llm_error"},
            "llm_hang": lambda: decision.fallback == "scheduler_error"
            and set(agentic.last_fallbacks.values()) == {"timeout"},
            "llm_garbage": lambda: decision.fallback is not None,
        }
        check = checks.get(fired)
        if check is None:
            return
        if check():
            self.counts.add(f"handled:{fired}")
        else:
            self.violation(
                f"{fired}: unexpected decision fallback={decision.fallback} causes={causes} "
                f"agentic={agentic.last_fallbacks}"
            )

    def _ledger_zero(self, lane: _Lane) -> bool:
        ledger = lane.ledger
        return ledger is None or (
            abs(ledger.in_use_mb) <= 1e-6 and ledger.active == 0 and ledger.queued == 0
        )

    def _check_ledger_at_rest(self, lane: _Lane, when: str) -> bool:
        ledger = lane.ledger
        if ledger is None:
            return True
        f = lane.figures
        f.peak_mb, f.end_mb = ledger.peak_mb, ledger.in_use_mb
        f.end_active, f.end_queued = ledger.active, ledger.queued
        if not self._ledger_zero(lane):
            self.violation(
                f"local ledger not at rest {when}: {ledger.in_use_mb} MB, "
                f"{ledger.active} active, {ledger.queued} queued"
            )
            return False
        return True

    # -- persisted stats -----------------------------------------------------------------------
    def _corrupt_stats(self, lane: _Lane) -> None:
        monitor: RuntimeMonitor = lane.node.monitor
        monitor.save(self.stats_path)
        if RuntimeMonitor.load(self.stats_path).state != monitor.state:
            self.violation("monitor stats did not survive a save/load round trip")
        garbage = self.rng.choice(_garbage_files())
        self.stats_path.write_bytes(garbage)
        self.faults.add("corrupt_stats")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cold = RuntimeMonitor.load(self.stats_path)
        warned = any(issubclass(w.category, MonitorStatsWarning) for w in caught)
        if cold.state.step == 0 and not cold.state.stats and warned:
            self.counts.add("handled:corrupt_stats")
        else:
            self.violation(f"corrupt stats {garbage[:40]!r} loaded as step {cold.state.step}")
        lane.node.monitor = cold

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> StressReport:
        t0 = time.perf_counter()
        left, index, stopped = self.config.calls, 0, False
        while left > 0:
            if time.perf_counter() - t0 > self.config.max_seconds:
                stopped = True
                break
            n = self.rng.randint(1, min(self.config.max_parallel, left))
            await self.step(index, n)
            left -= n
            index += 1
        for lane in self.lanes:
            self._check_ledger_at_rest(lane, "at the end")
        return self._report(time.perf_counter() - t0, stopped)

    def _report(self, wall_s: float, stopped: bool) -> StressReport:
        counts = self.counts.as_dict()
        faults = self.faults.as_dict()
        figures = [
            FaultFigures(
                kind=kind,
                rate=self.config.rates.get(kind, 0.0),
                injected=faults.get(kind, 0),
                handled=counts.get(f"handled:{kind}", 0),
                expected=EXPECTED[kind],
            )
            for kind in FAULT_KINDS
        ]
        prefixed = ("handled:", "fallback:", "agentic:")
        other = {k: v for k, v in counts.items() if not k.startswith(prefixed)}
        other["llm_ok"] = faults.get("llm_ok", 0)
        return StressReport(
            seed=self.config.seed,
            backend=self.config.backend,
            calls=self.calls,
            steps=self.steps,
            answered=self.answered,
            lost=self.lost,
            duplicated=self.duplicated,
            stray=self.stray,
            error_answers=self.error_answers,
            fallbacks={k[9:]: v for k, v in counts.items() if k.startswith("fallback:")},
            agentic_causes={k[8:]: v for k, v in counts.items() if k.startswith("agentic:")},
            faults=figures,
            ledgers=[lane.figures for lane in self.lanes],
            counters=other,
            violations=self.violations,
            violation_examples=self.violation_examples,
            wall_s=round(wall_s, 3),
            stopped_early=stopped,
        )


def run_stress(config: StressConfig) -> StressReport:
    """Run the stress harness once (its own event loop) and return the report."""
    with tempfile.TemporaryDirectory(prefix="devsched-stress-") as tmp:
        return asyncio.run(_Run(config, Path(tmp)).run())
