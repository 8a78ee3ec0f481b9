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
import inspect
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal, get_args

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field, model_validator

from langgraph_devsched._dev.graphs import one_node_graph
from langgraph_devsched._dev.stress.checks import Checker, Lane
from langgraph_devsched._dev.stress.faults import (
    CALL_FAULTS,
    DEFAULT_RATES,
    FAULT_KINDS,
    PROBE_FAULTS,
    STEP_FAULTS,
    StepFault,
)
from langgraph_devsched._dev.stress.probes import (
    PROBE_BACKENDS,
    PROBE_EXPECTED,
    ProbeContext,
    run_probe,
)
from langgraph_devsched._dev.stress.report import FaultFigures, LedgerFigures, StressReport
from langgraph_devsched._dev.stress.schedulers import FaultyScheduler
from langgraph_devsched._dev.stress.stats import corrupt_and_reload, garbage_files
from langgraph_devsched._dev.stress.tools import (
    TOOL_HINTS,
    TOOL_NAMES,
    TOOL_PARAMS,
    VRAM_BUDGET_MB,
    Toolbox,
)
from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.ledger import VramLedger
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed

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
    "scheduler_returns": "every call answered; the node falls back (scheduler_error or "
    "invalid_decision) for every call (predicted_ms=None: any fallback is one of those)",
    **PROBE_EXPECTED,
}


def node_accepts(option: str) -> bool:
    """Whether `DeviceToolNode` takes the keyword ``option`` (features land over time)."""
    return option in inspect.signature(DeviceToolNode.__init__).parameters


class _Observer(BaseCallbackHandler):
    """A callback handler on the run: the node then builds decision metadata per tool run."""

    def __init__(self) -> None:
        self.tool_runs = 0

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.tool_runs += 1


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
    node_call_timeout_s: float = Field(
        default=0.5, gt=0, description="the node's call_timeout_s, where the node has one"
    )
    probe_limit_s: float = Field(
        default=20.0, gt=0, description="a scenario probe that runs longer counts as hung"
    )
    gpus: int = Field(default=1, ge=1, le=8, description="GPUs of each lane's machine "
                      "(several: alternately full-size at speed 1 and half-size at speed 2)")

    @model_validator(mode="after")
    def _rates_valid(self) -> StressConfig:
        unknown = sorted(set(self.rates) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(
                f"unknown fault kind(s) {', '.join(unknown)}; valid kinds: {', '.join(FAULT_KINDS)}"
            )
        for group, kinds in (("call", CALL_FAULTS), ("step", STEP_FAULTS)):  # probes: each alone
            total = sum(self.rates.get(k, 0.0) for k in kinds)
            if total > 1.0 + 1e-9:
                raise ValueError(
                    f"{group} fault rates sum to {total:g} > 1 ({', '.join(kinds)}): "
                    "at most one fault hits a call or a step"
                )
        return self


class _Run:
    def __init__(self, config: StressConfig, stats_dir: Path) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.stats_path = stats_dir / "monitor_stats.json"
        self.node_timeout = node_accepts("call_timeout_s")
        self.toolbox = Toolbox(call_timeout_s=config.call_timeout_s, node_timeout=self.node_timeout)
        self.checker = Checker(
            self.toolbox.fired, node_timeout=self.node_timeout,
            node_deadline_s=config.node_call_timeout_s if self.node_timeout else 0.0,
        )
        self.probe_dir = stats_dir / "probes"
        names = ("simulated", "local") if config.backend == "both" else (config.backend,)
        self.lanes = [self._lane(name, i) for i, name in enumerate(names)]
        self.steps = 0
        self.by_backend: dict[str, dict[str, tuple[int, int]]] = {}
        """Scenario kind -> backend -> (injected, handled)."""
        if "local" in names:  # torch is imported once, up front, not inside a bounded probe
            next(lane for lane in self.lanes if lane.name == "local").node.backend.device_state()

    # -- set-up --------------------------------------------------------------------------------
    def _lane(self, name: str, index: int) -> Lane:
        seed = self.config.seed * 10 + index
        scheduler = FaultyScheduler(
            seed=seed, tally=self.checker.faults, llm_timeout_s=self.config.llm_timeout_s
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
        if self.node_timeout:
            common["call_timeout_s"] = self.config.node_call_timeout_s
        k = self.config.gpus
        more: tuple[VramLedger, ...] = ()
        if name == "simulated":
            if k == 1:
                bed = SimulatedTestbed(
                    TOOL_PARAMS, vram_budget_mb=VRAM_BUDGET_MB, cpu_cores=8, seed=seed
                )
            else:
                bed = SimulatedTestbed(TOOL_PARAMS, gpus=[
                    GpuSpec(vram_mb=budget, speed=speed, name=f"sim{i}")
                    for i, (budget, speed) in enumerate(stress_gpus(k))], cpu_cores=8, seed=seed)
            node = DeviceToolNode(self.toolbox.tools(), testbed=bed, **common)
        else:
            gpu: GpuConfig | list[GpuConfig] = GpuConfig(vram_budget_mb=VRAM_BUDGET_MB)
            if k > 1:
                gpu = [GpuConfig(budget, f"cuda:{i}", speed=speed)
                       for i, (budget, speed) in enumerate(stress_gpus(k))]
            backend = LocalBackend(
                gpu=gpu,
                cpu_workers=4,
                queue_timeout_s=self.config.queue_timeout_s,
            )
            ledger = backend.ledger
            more = backend.ledgers[1:]
            node = DeviceToolNode(self.toolbox.tools(), backend=backend, **common)
        graph = one_node_graph(node)
        per_gpu = [LedgerFigures(backend=name, budget_mb=budget, device=f"cuda:{i}")
                   for i, (budget, _) in enumerate(stress_gpus(k))]
        return Lane(name, node, graph, scheduler, ledger, per_gpu[0], reports, more, k,
                    more_figures=per_gpu[1:])

    def _draw(self, kinds: tuple[str, ...]) -> str | None:
        u, acc = self.rng.random(), 0.0
        for kind in kinds:
            acc += self.config.rates.get(kind, 0.0)
            if u < acc:
                return kind
        return None

    # -- one step ------------------------------------------------------------------------------
    def _calls(
        self, index: int, n: int, lane: Lane
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
        self.checker.counts.add("async_steps" if is_async else "sync_steps")
        before = len(lane.reports)
        inputs = {"messages": [AIMessage("", tool_calls=calls)]}
        # a handler on the run makes the node build decision metadata (predicted_ms et al.)
        config: dict[str, Any] = (
            {"callbacks": [_Observer()]} if fault == "scheduler_returns" else {}
        )
        out: dict[str, Any] | None = None
        try:
            if target is not None:
                out = await self._cancelled_then_retried(lane, inputs, calls, target)
            elif is_async:
                out = await asyncio.wait_for(lane.graph.ainvoke(inputs, config), STEP_LIMIT_S)
            else:
                out = await asyncio.wait_for(
                    asyncio.to_thread(lane.graph.invoke, inputs, config), STEP_LIMIT_S
                )
        except asyncio.TimeoutError:
            self.checker.step_failed(
                calls, f"{lane.name} step {index} (fault {fault}) took over {STEP_LIMIT_S:g} s",
                lane=lane.name, kind=fault or "invariant",
            )
        except Exception as exc:  # the node raised out of the graph run: a failure, not ours
            detail = f"{type(exc).__name__}: {exc}"[:200]
            returned = f" ({lane.scheduler.returned})" if lane.scheduler.returned else ""
            self.checker.step_failed(
                calls,
                f"{lane.name} {'async' if is_async else 'sync'} step {index} "
                f"(fault {fault}{returned}) raised {detail}",
                lane=lane.name, kind=fault or "invariant",
            )
        finally:
            lane.scheduler.release()
            self.toolbox.release_hangs()
        if target is not None:
            planned[target] = "none"  # the retry ran it normally
        self.steps += 1
        lane.figures.steps += 1
        batch = any(c["name"] in TOOL_NAMES for c in calls)
        if self.node_timeout and any(f == "hang" for f in planned.values()):
            # timed-out sync tools end now that they are released: their VRAM goes back and
            # (if the node waits for them) their step is reported then
            await self._settle(lane, "ledger_busy_after_timeout")
            for _ in range(400):
                if not batch or len(lane.reports) > before:
                    break
                await asyncio.sleep(0.005)
        if out is not None:
            self.checker.check_answers(calls, planned, out["messages"][1:], lane=lane.name)
            self.checker.check_reports(
                lane, lane.reports[before:], batch=batch, cancelled=target is not None
            )
        self.checker.check_ledger_at_rest(lane, f"after step {index}")
        self._probes(index)

    async def _settle(self, lane: Lane, counter: str) -> None:
        """Wait (5 s at most) for threads that outlived their answer to give their VRAM back."""
        if self.checker.ledger_zero(lane):
            return
        self.checker.counts.add(counter)
        for _ in range(1000):
            await asyncio.sleep(0.005)
            if self.checker.ledger_zero(lane):
                return

    # -- scenario probes -----------------------------------------------------------------------
    def _let_threads_end(self, before: int, kind: str, limit_s: float = 0.5) -> None:
        """Wait (``limit_s`` at most) for the threads a probe left (released hangs, a
        consultation still reading a garbage answer) to end, so their CPU time does not
        slow the next steps on a small machine."""
        end = time.perf_counter() + limit_s
        while threading.active_count() > before and time.perf_counter() < end:
            time.sleep(0.005)
        if threading.active_count() > before:
            self.checker.counts.add(f"threads_left_by:{kind}")

    def _probes(self, index: int) -> None:
        """Draw each scenario fault on its own and run the drawn ones (bounded, isolated)."""
        lanes = [lane.name for lane in self.lanes]
        for kind in PROBE_FAULTS:
            if self.rng.random() >= self.config.rates.get(kind, 0.0):
                continue
            where = [b for b in PROBE_BACKENDS[kind] if b in lanes or b == "none"]
            if not where:
                continue  # e.g. a local-only probe under --backend simulated
            backend = self.rng.choice(where)
            ctx = ProbeContext(
                kind=kind,
                index=index,
                backend=backend,
                seed=self.config.seed * 1_000_003 + index * 31 + PROBE_FAULTS.index(kind),
                tmp=self.probe_dir,
                node_timeout=self.node_timeout,
            )
            threads = threading.active_count()
            result = run_probe(ctx, self.config.probe_limit_s)
            self._let_threads_end(threads, kind)
            c = self.checker
            c.faults.add(kind, result.injected)
            c.counts.add(f"handled:{kind}", result.handled)
            c.counts.add(f"probes:{kind}:{backend}")
            seen = self.by_backend.setdefault(kind, {})
            injected, handled = seen.get(backend, (0, 0))
            seen[backend] = (injected + result.injected, handled + result.handled)
            for name, n in result.counts.items():
                c.counts.add(f"{kind}:{name}", n)
            for problem in result.problems:
                c.violation(f"{kind} ({backend}): {problem}", kind)

    def _block_target(self, calls: list[dict[str, Any]], planned: dict[str, str]) -> str | None:
        """Pick a well-formed call of a tool that can always run, to block until cancelled."""
        targets = [
            c for c in calls
            if c["name"] in TOOL_NAMES and planned[c["id"]] == "none"
            and TOOL_HINTS[c["name"]].get("cpu_allowed", True)
        ]
        if not targets:
            self.checker.counts.add("cancel_without_target")
            return None
        target = self.rng.choice(targets)
        target["args"]["fault"] = "block"
        planned[target["id"]] = "block"
        return str(target["id"])

    async def _cancelled_then_retried(
        self, lane: Lane, inputs: dict[str, Any], calls: list[dict[str, Any]], target: str
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
            self.checker.violation(f"blocked call {target} never started")
            return await asyncio.wait_for(task, STEP_LIMIT_S)
        task.cancel()
        try:
            await task
            self.checker.violation("a cancelled graph run returned, not raising CancelledError")
        except asyncio.CancelledError:
            pass
        self.checker.faults.add("cancel")
        if not self.checker.ledger_zero(lane):
            self.checker.counts.add("ledger_busy_right_after_cancel")
            # let cancelled children finish their cleanup: a sync tool's thread cannot be
            # stopped and holds its reservation until it returns (bounded, 5 s at most)
            for _ in range(1000):
                await asyncio.sleep(0.005)
                if self.checker.ledger_zero(lane):
                    break
        at_rest = self.checker.check_ledger_at_rest(lane, "after a cancellation")
        out: dict[str, Any] = await asyncio.wait_for(lane.graph.ainvoke(inputs), STEP_LIMIT_S)
        answers = [m for m in out["messages"][1:] if isinstance(m, ToolMessage)]
        if at_rest and sorted(m.tool_call_id for m in answers) == sorted(c["id"] for c in calls):
            self.checker.counts.add("handled:cancel")
        return out

    def _corrupt_stats(self, lane: Lane) -> None:
        self.checker.faults.add("corrupt_stats")
        cold, problem = corrupt_and_reload(
            lane.node.monitor, self.stats_path, self.rng.choice(garbage_files())
        )
        if problem is None:
            self.checker.counts.add("handled:corrupt_stats")
        else:
            self.checker.violation(problem)
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
            self.checker.check_ledger_at_rest(lane, "at the end")
        return self._report(time.perf_counter() - t0, stopped)

    def _where(self, kind: str) -> tuple[str, ...]:
        """The backends a kind runs on in this run."""
        lanes = tuple(lane.name for lane in self.lanes)
        if kind in PROBE_FAULTS:
            return tuple(b for b in PROBE_BACKENDS[kind] if b in lanes or b == "none")
        if kind == "gpu_oom":
            return tuple(b for b in lanes if b == "local")  # the simulation has its own OOMs
        return lanes

    def _report(self, wall_s: float, stopped: bool) -> StressReport:
        c = self.checker
        counts = c.counts.as_dict()
        faults = c.faults.as_dict()
        figures = [
            FaultFigures(
                kind=kind,
                rate=self.config.rates.get(kind, 0.0),
                injected=faults.get(kind, 0),
                handled=counts.get(f"handled:{kind}", 0),
                expected=EXPECTED[kind],
                backends=list(self._where(kind)),
                by_backend=self.by_backend.get(kind, {}),
            )
            for kind in FAULT_KINDS
        ]
        prefixed = ("handled:", "fallback:", "agentic:")
        other = {k: v for k, v in counts.items() if not k.startswith(prefixed)}
        other["llm_ok"] = faults.get("llm_ok", 0)
        return StressReport(
            seed=self.config.seed,
            backend=self.config.backend,
            calls=c.calls,
            steps=self.steps,
            answered=c.answered,
            lost=c.lost,
            duplicated=c.duplicated,
            stray=c.stray,
            error_answers=c.error_answers,
            fallbacks={k[9:]: v for k, v in counts.items() if k.startswith("fallback:")},
            agentic_causes={k[8:]: v for k, v in counts.items() if k.startswith("agentic:")},
            faults=figures,
            ledgers=[f.model_copy(update={"steps": lane.figures.steps})
                     for lane in self.lanes for f in lane.all_figures()],
            counters=other,
            violations=c.violations,
            violations_by_kind=c.violations_by_kind.as_dict(),
            violation_examples=c.violation_examples,
            wall_s=round(wall_s, 3),
            stopped_early=stopped,
            node_call_timeout=self.node_timeout,
        )


def stress_gpus(k: int) -> list[tuple[float, float]]:
    """(budget MB, speed) of each GPU of a k-GPU stress machine: alternately full-size at
    speed 1 and half-size at speed 2 (one GPU: full-size, speed 1)."""
    return [(VRAM_BUDGET_MB, 1.0) if i % 2 == 0 else (VRAM_BUDGET_MB / 2, 2.0)
            for i in range(k)]


def run_stress(config: StressConfig) -> StressReport:
    """Run the stress harness once (its own event loop) and return the report."""
    with tempfile.TemporaryDirectory(prefix="devsched-stress-") as tmp:
        return asyncio.run(_Run(config, Path(tmp)).run())
