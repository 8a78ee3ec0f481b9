"""``devsched bench --real``: scenarios whose tools are real tools, timed on real devices.

A real scenario names up to four tools (from the built-in suite or a user's ``MODULE:ATTR``)
that one AI message calls in parallel. Each scheduler drives a `DeviceToolNode` on this
machine's `LocalBackend` for R rounds; the round's makespan is the measured wall time of the
step. The oracle *executes* every allowed mapping (3^n, n ≤ 4), ``repeats`` times each, and
keeps the best median: that is the optimum, and a final mapping is optimal when its measured
median is within `REAL_TOLERANCE` of it. Without CUDA every GPU option would fall back to the
CPU, so the run uses the CPU alone and says so.

>>> s = RealScenario(name="t", tools=["hash_text", "tokenize_text"], rounds=1)
>>> s.category, s.size
('parallel', 'small')
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from langgraph_devsched.bench.runner import (
    BenchResult,
    ScenarioResult,
    SchedulerResult,
    validate_scheduler_names,
)
from langgraph_devsched.executors.base import Backend
from langgraph_devsched.hints import resolve_specs
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

REAL_TOLERANCE = 0.05
"""Measured makespans are noisy: within 5% of the best measured mapping counts as optimal."""
MAX_REAL_TOOLS = 4
BUILTIN_REAL_DIR = Path(__file__).resolve().parent.parent / "real_scenarios"


class RealScenario(BaseModel):
    """A real-execution scenario file (YAML)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    category: Literal["serial", "parallel", "memory"] = "parallel"
    suite: str = Field(default="builtin", description="'builtin' or MODULE:ATTR")
    size: Literal["small", "full"] = "small"
    tools: list[str] = Field(min_length=1, max_length=MAX_REAL_TOOLS)
    rounds: int = Field(default=5, ge=1)
    repeats: int = Field(default=1, ge=1, description="oracle runs per mapping (median kept)")


def load_real_scenarios(path: str | Path | None = None) -> list[RealScenario]:
    """Real scenarios from a file or folder, the built-in ones named (comma-separated), or
    every built-in one (None)."""
    root = Path(path) if path is not None else BUILTIN_REAL_DIR
    files = sorted(root.glob("*.yaml")) if root.is_dir() else [root]
    if not root.exists():
        known = {f.stem: f for f in sorted(BUILTIN_REAL_DIR.glob("*.yaml"))}
        wanted = [n.strip() for n in str(path).split(",") if n.strip()]
        if not wanted or any(n not in known for n in wanted):
            raise ValueError(f"real scenario path {path}: no such file or folder, nor a "
                             f"built-in real scenario name; built-in: {', '.join(known)}")
        files = [known[n] for n in dict.fromkeys(wanted)]
    out = []
    for file in files:
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
            out.append(RealScenario.model_validate(data))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"real scenario {file}: cannot read: {exc}") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"real scenario {file}: {problems}") from None
    if not out:
        raise ValueError(f"no real scenario (*.yaml) found at {root}")
    return out


class FixedMapping(SchedulerBase):
    """Answers one given option per tool name (the oracle's executed candidates)."""

    name = "oracle"

    def __init__(self, by_tool: dict[str, DeviceOption]) -> None:
        self.by_tool = by_tool

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision({c.call_id: self.by_tool[c.tool] for c in batch.calls}, "fixed")


def _tools(scenario: RealScenario) -> list[BaseTool]:
    from langgraph_devsched.profiling.command import select_tools

    return select_tools(scenario.suite, scenario.size, ",".join(scenario.tools))


def _step_input(tools: Sequence[BaseTool], round_index: int) -> dict[str, Any]:
    from langgraph_devsched.profiling.profiler import example_args

    calls = [
        {"name": t.name, "args": example_args(t, None), "id": f"r{round_index}-{t.name}"}
        for t in tools
    ]
    return {"messages": [AIMessage("", tool_calls=calls)]}


class _Harness:
    """Runs one step of the scenario's tools through a node with a given scheduler."""

    def __init__(self, tools: list[BaseTool], backend: Backend) -> None:
        self.tools, self.backend, self.rounds = tools, backend, 0

    def run(self, scheduler: Any) -> tuple[float, dict[str, DeviceOption], Decision]:
        from langgraph.graph import START, MessagesState, StateGraph

        from langgraph_devsched.node import DeviceToolNode, StepReport

        reports: list[StepReport] = []
        node = DeviceToolNode(
            self.tools, scheduler=scheduler, backend=self.backend, on_step=reports.append
        )
        graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools")
        self.rounds += 1
        step: Any = _step_input(self.tools, self.rounds)
        graph.compile().invoke(step)
        (report,) = reports
        assert report.record is not None
        mapping = {c.tool: report.decision.mapping[c.call_id] for c in report.batch.calls}
        return report.record.makespan_ms, mapping, report.decision


def run_real_scenario(
    scenario: RealScenario,
    schedulers: Sequence[str],
    *,
    backend: Backend | None = None,
    on_round: Callable[[str, int], None] | None = None,
    say: Callable[[str], None] = print,
) -> ScenarioResult:
    """Measure every scheduler and the executed brute force on this machine's devices."""
    from langgraph_devsched.executors.local import LocalBackend
    from langgraph_devsched.schedulers.registry import make_scheduler

    names = validate_scheduler_names(schedulers)
    backend = backend or LocalBackend()
    tools = _tools(scenario)
    harness = _Harness(tools, backend)
    gpu = backend.device_state().gpu_available
    if not gpu:
        reason = backend.device_state().reason
        say(f"{scenario.name}: no CUDA ({reason}); running with the CPU alone")
    specs = resolve_specs({t.name: t for t in tools})
    allowed: dict[str, tuple[DeviceOption, ...]] = {
        t.name: specs[t.name].allowed_options() if gpu else ("cpu",) for t in tools
    }
    harness.run(FixedMapping(dict.fromkeys(allowed, "cpu")))  # warm-up: build the models
    if gpu:
        harness.run(FixedMapping({n: opts[0] for n, opts in allowed.items()}))
    table: dict[tuple[DeviceOption, ...], float] = {}
    names_order = list(allowed)
    for combo in itertools.product(*(allowed[n] for n in names_order)):
        mapping = dict(zip(names_order, combo, strict=True))
        runs = [harness.run(FixedMapping(mapping))[0] for _ in range(scenario.repeats)]
        table[combo] = statistics.median(runs)
        if on_round is not None:
            on_round("oracle", len(table))
    best_combo = min(table, key=lambda c: (table[c], c))
    best = table[best_combo]
    result = ScenarioResult(
        scenario.name, scenario.category, best, dict(zip(names_order, best_combo, strict=True)),
        scenario.rounds,
    )
    limit = best * (1 + REAL_TOLERANCE)
    for name in names:
        if name == "oracle":
            mapping = dict(zip(names_order, best_combo, strict=True))
            result.results[name] = SchedulerResult(
                "oracle", mapping, best, True, 1, 0.0, 0, 0.0, [best], [best]
            )
            continue
        scheduler = make_scheduler(name)
        spans: list[float] = []
        decision_ms: list[float] = []
        final: dict[str, DeviceOption] = {}
        llm = probes = 0
        first = None
        for r in range(1, scenario.rounds + 1):
            t0 = time.perf_counter()
            span, final, decision = harness.run(scheduler)
            decision_ms.append((time.perf_counter() - t0) * 1000.0 - span)
            spans.append(span)
            llm += decision.llm_calls
            probes += int(decision.probe)
            combo = tuple(final[n] for n in names_order)
            if first is None and table.get(combo, float("inf")) <= limit:
                first = r
            if on_round is not None:
                on_round(name, r)
        combo = tuple(final[n] for n in names_order)
        final_span = table.get(combo, spans[-1])
        result.results[name] = SchedulerResult(
            scheduler=name,
            final_mapping=final,
            final_makespan_ms=final_span,
            optimal=final_span <= limit,
            rounds_to_optimal=first,
            regret_ms=sum(max(0.0, s - best) for s in spans),
            llm_calls=llm,
            decision_ms_median=max(0.0, statistics.median(decision_ms)),
            round_makespans_ms=spans,
            measured_makespans_ms=spans,
            probes=probes,
        )
    return result


def run_real_benchmark(
    scenarios: Sequence[RealScenario],
    schedulers: Sequence[str],
    *,
    backend: Backend | None = None,
    on_round: Callable[[RealScenario, str, int], None] | None = None,
    say: Callable[[str], None] = print,
) -> BenchResult:
    """Every scheduler on every real scenario, measured on this machine."""
    names = list(schedulers)
    if "oracle" not in names:
        names.append("oracle")
    out = []
    for scenario in scenarios:
        hook = None if on_round is None else (lambda n, r, s=scenario: on_round(s, n, r))
        out.append(
            run_real_scenario(scenario, names, backend=backend, on_round=hook, say=say)
        )
    return BenchResult(out, names, None, None, None)
