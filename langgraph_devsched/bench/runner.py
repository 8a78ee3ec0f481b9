"""Run schedulers on scenarios for R rounds and measure accuracy, regret and decision time.

Per (scheduler, scenario): a fresh testbed (same seed for every scheduler, so the noise draws
match), then R rounds. In a round each batch of the workload is decided on
``SchedulerView(device=bed.device_state(), observations=monitor.snapshot())``, executed with
noise by `SimulatedTestbed.run_step`, and fed back through ``observe`` (and the monitor's
``record``). The round pays the noise-free makespan of the executed mappings; regret is that
minus the brute-force optimum, summed over rounds (probes included: every executed mapping
counts). Decision time is cost too: each decision is timed (``clock``), and a round's
``wall_ms`` is its decision time plus its makespan (``decision_cost="measured"``, the
default) or its makespan alone (``"none"``); ``wall_regret_ms`` is the regret on wall time.

The reference is exact over the rounds run (`bench.horizon`): each round's reference is the
least any sequence of mappings can pay in that round, the resident-model state (loads,
evictions) carried from every earlier step, so no scheduler can end a round below it. Without
resident models that is the per-batch brute-force optimum (`optimum`) every round. A round
that ends below its reference anyway (a ratio under `BELOW_REFERENCE`) means the reference is
wrong: the round is listed in `SchedulerResult.below_reference` and a `ReferenceBeaten`
warning is raised.

>>> from langgraph_devsched.bench.scenario import Scenario
>>> s = Scenario.model_validate({"name": "fft", "category": "serial",
...     "testbed": {"vram_budget_mb": 8000, "noise": 0},
...     "tools": {"fft": {"params": {"cpu_ms": 30, "gpu_ms": 2, "transfer_ms": 40}}},
...     "workload": {"kind": "serial", "calls": ["fft"], "rounds": 3}})
>>> r = run_scenario(s, ["all_gpu", "oracle"])
>>> r.optimal_makespan_ms, r.results["all_gpu"].regret_ms, r.results["oracle"].optimal
(30.0, 36.0, True)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import statistics
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from langgraph_devsched.bench.agentic_stats import AgenticStats, AgenticSummary, exact_policy_ms
from langgraph_devsched.bench.declare import Declare, declared_specs, parse_declare
from langgraph_devsched.bench.horizon import (
    Reference,
    WholeRun,
    horizon_reference,
    whole_run_reference,
)
from langgraph_devsched.bench.horizon_gpus import (
    SEARCHABLE,
    GpuReference,
    gpus_reference,
    placements_per_state,
)
from langgraph_devsched.bench.preloads import (
    PreloadRuns,
    beside_tools,
    run_background,
    run_preloads,
)
from langgraph_devsched.bench.scenario import Request, Scenario
from langgraph_devsched.bench.words_run import WordsRun
from langgraph_devsched.executors.base import PlannedCall, planned_gpus
from langgraph_devsched.gpus import check_gpus
from langgraph_devsched.hedging import check_hedges, hedge_outcomes
from langgraph_devsched.hedging.simulated import IdleRuns, idle_calibration, run_hedged_step
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import (
    Batch,
    Decision,
    Scheduler,
    SchedulerView,
    batch_snapshot,
)
from langgraph_devsched.schedulers.classic.oracle import OracleScheduler
from langgraph_devsched.schedulers.protocols import capabilities
from langgraph_devsched.schedulers.registry import scheduler_factory, scheduler_names
from langgraph_devsched.testbed import SimulatedTestbed
from langgraph_devsched.words.option import FORECASTS

OPTIMAL_TOLERANCE = 0.01
"""A mapping is optimal when its noise-free makespan is within 1% of the optimum."""
DEFAULT_ROUNDS = 20
DecisionCost = Literal["measured", "none"]
"""Whether measured decision time counts in a round's wall time (``none``: makespan only)."""
DECISION_COSTS: tuple[str, ...] = get_args(DecisionCost)
BELOW_REFERENCE = 0.999
"""A round under this fraction of its reference beats a lower bound: the reference is wrong."""


class ReferenceBeaten(UserWarning):
    """A scheduler ended a round below the reference (which is then not a lower bound)."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; 0.0 for no values.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([5.0], 95)
    (2.5, 5.0)
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def check_decision_cost(value: str) -> DecisionCost:
    """``value`` if it is a `DecisionCost`, else `ValueError` listing the valid ones."""
    if value not in DECISION_COSTS:
        raise ValueError(
            f"unknown decision cost {value!r}; valid: {', '.join(DECISION_COSTS)}")
    return value  # type: ignore[return-value]


class BenchMonitor(Protocol):
    """The hook for a runtime monitor: it sees every executed step and offers a snapshot."""

    def record(self, record: StepRecord, *, batch: Batch, decision: Decision) -> None: ...

    def snapshot(self) -> Any: ...


MonitorFactory = Callable[[Scenario], BenchMonitor]
"""Builds a fresh monitor for one (scheduler, scenario) run."""

StepRunner = Callable[[SimulatedTestbed, Batch, list[tuple[str, str, DeviceOption]]], StepRecord]
"""Executes one decided batch on the testbed (default: ``bed.run_step(calls)``); e.g.
`langgraph_devsched.executors.ray_sim.RaySimulatedSteps` runs every call as a Ray task."""


@dataclass
class SchedulerResult:
    """One scheduler on one scenario."""

    scheduler: str
    final_mapping: dict[str, DeviceOption]
    final_makespan_ms: float
    optimal: bool
    rounds_to_optimal: int | None
    regret_ms: float
    llm_calls: int
    decision_ms_median: float
    round_makespans_ms: list[float] = field(default_factory=list)
    """Noise-free makespan of each round's executed mappings."""
    measured_makespans_ms: list[float] = field(default_factory=list)
    """Makespan each round actually took on the noisy testbed."""
    probes: int = 0
    fallbacks: int = 0
    decision_ms: list[float] = field(default_factory=list)
    """Measured time of every decision, in order."""
    round_wall_ms: list[float] = field(default_factory=list)
    """Each round's decision time (unless ``decision_cost="none"``) plus its makespan."""
    wall_regret_ms: float = 0.0
    """Regret on wall time: sum over rounds of wall time minus the optimum makespan."""
    reused: int = 0
    """Decisions the scheduler reused unchanged (`Decision.reused`)."""
    agentic: AgenticSummary | None = None
    """The agentic scheduler's consultations: valid answers, fallbacks by cause, latency."""
    evictions_per_step: float = 0.0
    """Models evicted per executed step (mean over every batch of every round)."""
    loads: int = 0
    """Model loads (cold starts, GPU or host) over the whole run."""
    below_reference: list[int] = field(default_factory=list)
    """Rounds (1-based) whose noise-free makespan is under `BELOW_REFERENCE` times the
    round's reference: never, unless the reference is wrong."""
    hedges: int = 0
    """Calls run on both sides (`Decision.hedges`) over the whole run."""
    hedge_cost_ms: float = 0.0
    """What the hedges added to the noise-free makespans (inside ``regret_ms``; negative
    where a hedge's second run answered sooner)."""
    hedge_device_ms: float = 0.0
    """Device time the hedges' losers held before they ended or were cancelled."""
    idle_runs: int = 0
    """Idle-time calibration runs between steps (during the scenario's ``think_ms``)."""
    idle_cut: int = 0
    """Idle-time runs cut where the next step arrived (recorded as censored)."""
    idle_device_ms: float = 0.0
    """Device time of the idle-time runs (outside every step's wall time)."""
    final_devices: dict[str, str] = field(default_factory=dict)
    """Several GPUs: the device each call of the last round ran on (``cuda:k`` or ``cpu``);
    empty on one GPU."""
    preloads: int = 0
    """Model loads run between steps (while the agent's LLM thinks; `bench.preloads`)."""
    preload_device_ms: float = 0.0
    """Their device time (outside every step's wall time)."""
    preload_saved_ms: float = 0.0
    """The loads that later steps did not pay because a preloaded model was warm."""
    preloads_wasted: int = 0
    """Preloads evicted or never used before the run ended, or cut by the next step."""
    preload_wasted_ms: float = 0.0
    """Their device time."""
    preloads_beside: int = 0
    """Of `preloads`, the loads started beside a step (``Decision.background``)."""
    preload_delay_ms: float = 0.0
    """What loads beside a step delayed the next step by (their time past the step and
    the think time)."""
    words: dict[str, Any] | None = None
    """Forecasts from words over the run (`words_run.WordsRun.summary`: asked, failed, in
    force before their request's first step, latency, node precision/recall/F1); None where
    the scheduler read no words or the scenario has no requests."""
    total_ratio: float | None = None
    """The run's total (the sum of ``round_makespans_ms``) over the whole-run reference's
    (`ScenarioResult.total_reference_ms`); None without one."""

    @property
    def total_ms(self) -> float:
        """The whole run: the sum of the rounds' noise-free makespans."""
        return sum(self.round_makespans_ms)

    @property
    def decision_ms_p50(self) -> float:
        return percentile(self.decision_ms, 50)

    @property
    def decision_ms_p95(self) -> float:
        return percentile(self.decision_ms, 95)


@dataclass
class ScenarioResult:
    """Every scheduler on one scenario, with the brute-force reference."""

    name: str
    category: str
    optimal_makespan_ms: float
    optimal_mapping: dict[str, DeviceOption]
    rounds: int
    results: dict[str, SchedulerResult] = field(default_factory=dict)
    resident_models: bool = False
    """The scenario's tools keep model weights resident (see `reference`)."""
    reference_makespans_ms: list[float] = field(default_factory=list)
    """The reference of each round: the least any sequence of mappings pays in it."""
    physics: str = "processor_sharing"
    """The ground truth's contention physics (``testbed.physics``)."""
    reference_exact: bool = True
    """False when the reference's search hit its state budget (`horizon.MAX_STATES`)."""
    optimal_devices: dict[str, str] = field(default_factory=dict)
    """Several GPUs: the device of every call of ``optimal_mapping``; empty on one GPU."""
    total_reference_ms: float = 0.0
    """The whole-run reference: the least the rounds' makespans can add up to over every
    sequence of mappings and loads between steps (`horizon.whole_run_reference`)."""
    total_reference_exact: bool = True
    """False when that search hit its budget (`horizon.MAX_STATES`; several GPUs:
    `horizon_gpus.MAX_GPU_STATES`, `horizon_gpus.MAX_PLACEMENTS`): not a proven bound."""

    def below_reference(self) -> dict[str, list[int]]:
        """Per scheduler that ended a round below its reference, those rounds."""
        return {n: r.below_reference for n, r in self.results.items() if r.below_reference}


def call_ids(scenario: Scenario) -> list[list[str]]:
    """Readable, workload-unique call ids: the tool name, ``#k`` when repeated in a batch,
    prefixed ``b<i>/`` when the round has several batches."""
    batches = scenario.batches()
    out = []
    for b, tools in enumerate(batches):
        prefix = f"b{b}/" if len(batches) > 1 else ""
        ids = []
        for k, tool in enumerate(tools):
            repeated = tools.count(tool) > 1
            ids.append(f"{prefix}{tool}#{k}" if repeated else f"{prefix}{tool}")
        out.append(ids)
    return out


def as_declare(declare: Declare | str) -> Declare:
    """``declare`` as a `Declare` (text is parsed by `parse_declare`)."""
    return parse_declare(declare) if isinstance(declare, str) else declare


def scenario_batches(
    scenario: Scenario, *, declare: Declare | str = "exact", seed: int | None = None
) -> list[Batch]:
    """The workload's batches as schedulers see them (declared hints only, as ``declare``
    says: ``exact`` feeds every tool without a profile its ground-truth solo profile)."""
    mode = as_declare(declare)
    specs = declared_specs(
        scenario.tools, mode, seed=scenario.testbed.seed if seed is None else seed)
    return [
        Batch.of([(cid, tool, specs[tool]) for cid, tool in zip(ids, tools, strict=True)])
        for ids, tools in zip(call_ids(scenario), scenario.batches(), strict=True)
    ]


def default_schedulers(
    *, with_monitor: bool = False, skipped: dict[str, str] | None = None
) -> list[str]:
    """Every registered scheduler that can be built without extra arguments, and the oracle.

    With ``with_monitor`` a scheduler whose only required argument is ``monitor`` counts too.
    Schedulers left out are put in ``skipped`` with the reason (e.g. an unconfigured LLM).
    """
    names = []
    provided = {"monitor"} if with_monitor else set()
    for name in scheduler_names():
        if name == "oracle":
            names.append(name)
            continue
        try:
            factory = scheduler_factory(name)
            required = _required_params(factory)
            if not required <= provided:
                raise TypeError(f"needs argument(s) {', '.join(sorted(required - provided))}")
            if not required:
                factory()
        except Exception as exc:  # not buildable here: say why, run the others
            if skipped is not None:
                skipped[name] = " ".join(f"{type(exc).__name__}: {exc}".split())  # whole
            continue
        names.append(name)
    return names


def _required_params(factory: Any) -> set[str]:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }


WORDS_VARIANTS = {f"monitor+{f}": ("monitor", f) for f in FORECASTS}
"""The monitor policy with a forecast from words, by name (``monitor+lexical``,
``monitor+oracle``: the request's true tools, ground truth), side by side with the others."""


def validate_scheduler_names(names: Sequence[str]) -> list[str]:
    """The names as a list, or `ValueError` naming the unknown ones and the valid ones."""
    valid = (*scheduler_names(), *WORDS_VARIANTS)
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ValueError(
            f"unknown scheduler(s) {', '.join(map(repr, unknown))}; "
            f"valid schedulers: {', '.join(valid)}"
        )
    return list(names)


SchedulerOptions = Mapping[str, Mapping[str, Any]]
"""Constructor options per scheduler name, e.g. ``{"monitor": {"max_decision_ms": None}}``
(a decision budget that no machine's speed can cut short)."""


def build_scheduler(
    name: str, *, testbed: SimulatedTestbed, monitor: BenchMonitor | None = None,
    options: SchedulerOptions | None = None,
) -> Scheduler:
    """A fresh scheduler: the oracle is handed the testbed (only it); a scheduler whose
    constructor takes ``monitor`` gets the run's monitor; ``options[name]`` go to its
    constructor."""
    if name == "oracle":
        return OracleScheduler(testbed=testbed)
    base, forecast = WORDS_VARIANTS.get(name, (name, None))
    factory = scheduler_factory(base)
    accepts = inspect.signature(factory).parameters
    kwargs: dict[str, Any] = dict((options or {}).get(name, {}))
    if forecast is not None:
        kwargs["forecast"] = forecast
    if monitor is not None and "monitor" in accepts:
        kwargs["monitor"] = monitor
    scheduler: Scheduler = factory(**kwargs)
    return scheduler


def _tools(batch: Batch) -> list[str]:
    return [c.tool for c in batch.calls]


def _check(decision: Decision, batch: Batch, scheduler: str) -> tuple[DeviceOption, ...]:
    missing = [cid for cid in batch.call_ids if cid not in decision.mapping]
    if missing:
        raise ValueError(f"scheduler {scheduler!r} gave no option for call(s) {missing}")
    options = decision.options_for(batch)
    for cid, option in zip(batch.call_ids, options, strict=True):
        if option not in DEVICE_OPTIONS:
            raise ValueError(
                f"scheduler {scheduler!r} chose {option!r} for call {cid!r}; "
                f"valid options: {', '.join(DEVICE_OPTIONS)}"
            )
    return options


def step_gpus(
    bed: SimulatedTestbed, batch: Batch, decision: Decision, view: SchedulerView
) -> dict[str, int] | None:
    """Several GPUs: the GPU of each GPU-placed call, the decision's where valid, else the
    default rule (as the node applies them); None on one GPU."""
    if bed.gpu_count < 2:
        return None
    options = decision.options_for(batch)
    planned = [PlannedCall(c.call_id, c.tool, o, c.spec) for c, o in zip(batch.calls, options,
                                                                         strict=True)]
    named, _ = check_gpus(decision.gpus, [p.call_id for p in planned if p.option != "cpu"],
                          view.devices, {c.call_id: c.spec.gpus for c in batch.calls})
    planned = [dataclasses.replace(p, gpu=named.get(p.call_id)) for p in planned]
    return planned_gpus(planned, view.devices)


def device_labels(
    call_ids: Sequence[str], options: Sequence[DeviceOption], gpus: Mapping[str, int]
) -> dict[str, str]:
    """Each call's device: ``cuda:k`` for a GPU-placed call on GPU k, else ``cpu``.

    >>> device_labels(["a", "b"], ["gpu_now", "cpu"], {"a": 1})
    {'a': 'cuda:1', 'b': 'cpu'}
    """
    return {c: "cpu" if o == "cpu" else f"cuda:{gpus.get(c, 0)}"
            for c, o in zip(call_ids, options, strict=True)}


def _per_step_reference(scenario: Scenario, rounds: int) -> Reference:
    """Several GPUs where `horizon_gpus` does not search: each step's oracle optimum in
    turn, the state carried; a proven bound only without resident models (then no step
    changes the next)."""
    bed = scenario.make_testbed(noise=0.0)
    oracle = OracleScheduler(testbed=bed)
    round_ms: list[float] = []
    mapping: dict[str, DeviceOption] = {}
    devices: dict[str, str] = {}
    for _ in range(rounds):
        total = 0.0
        for batch in scenario_batches(scenario):
            view = SchedulerView(device=bed.device_state())
            decision = oracle.decide(batch, view)
            options = decision.options_for(batch)
            calls = list(zip(batch.call_ids, _tools(batch), options, strict=True))
            gpus = step_gpus(bed, batch, decision, view) or {}
            total += bed.run_step(calls, gpus=gpus).makespan_ms
            mapping.update(decision.mapping)
            devices.update(device_labels(batch.call_ids, options, gpus))
        round_ms.append(total)
    return Reference(tuple(round_ms), mapping, 1, not scenario.has_resident_models(),
                     devices=devices)


def optimum(scenario: Scenario) -> tuple[list[float], dict[str, DeviceOption]]:
    """The brute-force optimal noise-free makespan of each batch, and the optimal mapping."""
    bed = scenario.make_testbed(noise=0.0)
    oracle = OracleScheduler(testbed=bed)
    view = SchedulerView(device=bed.device_state())
    spans: list[float] = []
    mapping: dict[str, DeviceOption] = {}
    for batch in scenario_batches(scenario):
        decision = oracle.decide(batch, view)
        options = decision.options_for(batch)
        spans.append(bed.makespan(list(zip(batch.call_ids, _tools(batch), options, strict=True)),
                                  gpus=dict(decision.gpus) or None))
        mapping.update(decision.mapping)
    return spans, mapping


_REFERENCES: OrderedDict[tuple[str, int], Reference] = OrderedDict()
_MAX_REFERENCES = 64


def scenario_reference(scenario: Scenario, rounds: int) -> Reference:
    """The exact reference of ``rounds`` rounds of ``scenario`` (`bench.horizon`) on a
    noise-free testbed, the declared hints (``exact``) deciding the options a call may take;
    the last `_MAX_REFERENCES` are kept (the same scenario file and rounds: the same one)."""
    key = (scenario.model_dump_json(), rounds)
    found = _REFERENCES.get(key)
    if found is None and _several_gpus(scenario):
        if _gpus_searched(scenario):
            g = scenario_gpus_reference(scenario, rounds)
            found = Reference(g.round_ms, g.mapping, g.states, g.exact, devices=g.devices)
        else:  # exact without resident models (no step changes the next)
            found = _per_step_reference(scenario, rounds)
        _REFERENCES[key] = found
    if found is None:
        found = horizon_reference(scenario.make_testbed(noise=0.0), scenario_batches(scenario),
                                  rounds, **_idle_times(scenario))
        _REFERENCES[key] = found
        while len(_REFERENCES) > _MAX_REFERENCES:
            _REFERENCES.popitem(last=False)
    _REFERENCES.move_to_end(key)
    return dataclasses.replace(found, mapping=dict(found.mapping))


_WHOLE_RUNS: OrderedDict[tuple[str, int], WholeRun] = OrderedDict()
_GPU_REFERENCES: OrderedDict[tuple[str, int], GpuReference] = OrderedDict()


def _idle_times(scenario: Scenario) -> dict[str, Any]:
    """The references' idle times: ``think_ms`` after every step, or the sequence's idle
    time after each batch and before the first (``idle_ms``), in parts where a request
    arrives in it (`Workload.idle_parts`)."""
    work = scenario.workload
    if work.idle_ms is None:
        return {"think_ms": work.think_ms}
    return {"think_ms": work.parts_after(), "before_ms": work.idle_parts(0)}


def _several_gpus(scenario: Scenario) -> bool:
    return scenario.testbed.gpus is not None and len(scenario.testbed.gpus) > 1


def _gpus_searched(scenario: Scenario) -> bool:
    """Several GPUs with resident models, and batches small enough for `horizon_gpus`."""
    return (_several_gpus(scenario) and scenario.has_resident_models()
            and placements_per_state(scenario.make_testbed(noise=0.0),
                                     scenario_batches(scenario)) <= SEARCHABLE)


def scenario_gpus_reference(scenario: Scenario, rounds: int) -> GpuReference:
    """Several GPUs: the per-round and whole-run references of ``rounds`` rounds of
    ``scenario`` (`horizon_gpus.gpus_reference`, the scenario's think time between steps);
    the last `_MAX_REFERENCES` are kept."""
    key = (scenario.model_dump_json(), rounds)
    found = _GPU_REFERENCES.get(key)
    if found is None:
        found = _GPU_REFERENCES[key] = gpus_reference(
            scenario.make_testbed(noise=0.0), scenario_batches(scenario), rounds,
            **_idle_times(scenario))
        while len(_GPU_REFERENCES) > _MAX_REFERENCES:
            _GPU_REFERENCES.popitem(last=False)
    _GPU_REFERENCES.move_to_end(key)
    return found


def scenario_whole_run(scenario: Scenario, rounds: int) -> WholeRun:
    """The whole-run reference of ``rounds`` rounds of ``scenario`` (`horizon.
    whole_run_reference`, the scenario's think time between steps). Several GPUs: the
    shortest path of `horizon_gpus` with resident models (batches of at most
    `horizon_gpus.SEARCHABLE` placements), else the rounds' per-step optima added up (exact
    without resident models: no step changes the next)."""
    key = (scenario.model_dump_json(), rounds)
    found = _WHOLE_RUNS.get(key)
    if found is None:
        ref = scenario_reference(scenario, rounds)
        if _gpus_searched(scenario):
            g = scenario_gpus_reference(scenario, rounds)
            found = WholeRun(g.total_ms, g.exact, g.states)
        elif _several_gpus(scenario) or rounds == 1:  # exact without resident models
            # (rounds independent), or one round (the round's reference is the whole run)
            found = WholeRun(sum(ref.round_ms), ref.exact, ref.states)
        else:
            found = whole_run_reference(
                scenario.make_testbed(noise=0.0), scenario_batches(scenario), rounds,
                round_bounds=ref.round_ms, **_idle_times(scenario))
        _WHOLE_RUNS[key] = found
        while len(_WHOLE_RUNS) > _MAX_REFERENCES:
            _WHOLE_RUNS.popitem(last=False)
    _WHOLE_RUNS.move_to_end(key)
    return found


def reference(
    scenario: Scenario, rounds: int
) -> tuple[list[float], dict[str, DeviceOption]]:
    """Each round's reference makespan and the mapping that reaches the last one
    (`scenario_reference`); without resident models, `optimum` every round."""
    ref = scenario_reference(scenario, rounds)
    return list(ref.round_ms), ref.mapping


def run_scenario(
    scenario: Scenario,
    schedulers: Sequence[str],
    *,
    rounds: int | None = None,
    seed: int | None = None,
    noise: float | None = None,
    monitor_factory: MonitorFactory | None = None,
    on_round: Callable[[str, int], None] | None = None,
    step_runner: StepRunner | None = None,
    decision_cost: DecisionCost = "measured",
    clock: Callable[[], float] = time.perf_counter,
    declare: Declare | str = "exact",
    scheduler_options: SchedulerOptions | None = None,
) -> ScenarioResult:
    """Run each scheduler for ``rounds`` (default: the scenario's) and collect the metrics.

    ``clock`` (seconds) times each decision; ``decision_cost`` says whether that time counts
    in the rounds' wall time; ``declare`` what the tools declare (see `bench.declare`);
    ``scheduler_options`` what each scheduler is built with (`build_scheduler`)."""
    names = validate_scheduler_names(schedulers)
    check_decision_cost(decision_cost)
    mode = as_declare(declare)
    rounds = scenario.workload.rounds if rounds is None else rounds
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    ref = scenario_reference(scenario, rounds)
    per_round = list(ref.round_ms)
    out = ScenarioResult(scenario.name, scenario.category, per_round[-1], ref.mapping, rounds,
                         resident_models=scenario.has_resident_models(),
                         reference_makespans_ms=per_round, physics=scenario.physics,
                         reference_exact=ref.exact, optimal_devices=dict(ref.devices))
    whole = scenario_whole_run(scenario, rounds)
    out.total_reference_ms, out.total_reference_exact = whole.total_ms, whole.exact
    for name in names:
        result = out.results[name] = _run_one(
            scenario, name, rounds, seed, noise, monitor_factory, per_round, on_round,
            step_runner, counted=decision_cost == "measured", clock=clock, declare=mode,
            scheduler_options=scheduler_options,
        )
        if whole.total_ms > 0:
            result.total_ratio = result.total_ms / whole.total_ms
    for name, below in out.below_reference().items():
        spans = out.results[name].round_makespans_ms
        worst = min(below, key=lambda r: spans[r - 1] / per_round[r - 1])
        warnings.warn(ReferenceBeaten(
            f"{scenario.name}: {name} ended round {worst} at {spans[worst - 1]:.1f} ms, below "
            f"the reference's {per_round[worst - 1]:.1f} ms (rounds {below}); the reference is "
            f"not a lower bound" + ("" if ref.exact else " (its search hit its state budget)")),
            stacklevel=2)
    return out


def _observer(scheduler: Scheduler, monitor: BenchMonitor | None) -> Callable[
        [Batch, Decision, StepRecord], None]:
    """Feeds an idle-time run to the scheduler and the run's monitor, as a step is fed."""

    def observe(batch: Batch, decision: Decision, record: StepRecord) -> None:
        scheduler.observe(batch, decision, record)
        if monitor is not None:
            monitor.record(record, batch=batch, decision=decision)

    return observe


def _between_steps(bed: SimulatedTestbed, scheduler: Scheduler,
                   monitor: BenchMonitor | None, idle: IdleRuns, preloaded: PreloadRuns,
                   words: WordsRun | None, parts: tuple[float, ...], request: Request | None,
                   *, preloads: bool = True) -> None:
    """The idle time before a step (the agent's LLM turn), in ``parts``
    (`Workload.idle_parts`: where a ``request`` arrives in it, before the arrival and after,
    as the references have it): idle-time calibration runs first, then in each part the
    scheduler's loads. A scheduler that reads words is asked at the request's arrival
    (`words_run`); the loads of the part after the arrival wait for its forecast where it
    comes in force within that part."""
    think = sum(parts)
    arrival = think - parts[-1] if request is not None else None
    if words is not None and request is not None:
        words.arrive(request, think - parts[-1])
    used = think
    if think > 0:
        used = think - idle_calibration(bed, scheduler, think, _observer(scheduler, monitor),
                                        idle)
    now = offset = 0.0
    for k, part in enumerate(parts):
        end = offset + part
        start = max(offset, used)
        if words is not None and arrival is not None and k == len(parts) - 1:
            wait = words.ready_in(end - now)
            if wait is not None:
                start = max(start, now + wait)
        if words is not None:
            words.advance(start - now)
        now = start
        if preloads and end > start:
            run_preloads(bed, scheduler, end - start, preloaded)
        if words is not None:
            words.advance(end - now)
        now = offset = end


def _run_one(
    scenario: Scenario,
    name: str,
    rounds: int,
    seed: int | None,
    noise: float | None,
    monitor_factory: MonitorFactory | None,
    per_round: list[float],
    on_round: Callable[[str, int], None] | None,
    step_runner: StepRunner | None = None,
    *,
    counted: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    declare: Declare | None = None,
    scheduler_options: SchedulerOptions | None = None,
) -> SchedulerResult:
    bed = scenario.make_testbed(noise=noise, seed=seed)
    monitor = monitor_factory(scenario) if monitor_factory is not None else None
    snapshot = batch_snapshot(monitor) if monitor is not None else None  # batch's tools only
    scheduler = build_scheduler(name, testbed=bed, monitor=monitor,
                                options=scheduler_options)
    batches = scenario_batches(scenario, declare=declare or Declare(), seed=seed)
    declare_tools = capabilities(scheduler).declare_tools
    if declare_tools is not None:  # the app's tools are known before any step, as to a node
        declare_tools({c.tool: c.spec for b in batches for c in b.calls})
    cache: dict[tuple[Any, ...], float] = {}
    round_spans: list[float] = []
    measured: list[float] = []
    decision_ms: list[float] = []
    walls: list[float] = []
    llm_calls = probes = fallbacks = reused = loads = evictions = steps = hedge_calls = 0
    hedge_cost = hedge_device = 0.0
    idle = IdleRuns()
    preloaded = PreloadRuns()
    words = WordsRun.of(scheduler, scenario)
    work = scenario.workload
    parts_after, starts = work.parts_after(), {q.step: q for q in work.requests}
    between = functools.partial(_between_steps, bed, scheduler, monitor, idle, preloaded,
                                words)
    if work.idle_before(0) > 0 or 0 in starts:  # before the first step: the first turn
        between(work.idle_parts(0), starts.get(0))
    agentic = AgenticStats()
    final: dict[str, DeviceOption] = {}
    devices: dict[str, str] = {}
    limits = [best * (1 + OPTIMAL_TOLERANCE) + 1e-9 for best in per_round]
    first_optimal = None
    for r in range(1, rounds + 1):
        noise_free = took = deciding = 0.0
        for b, batch in enumerate(batches):
            if words is not None and b in starts:
                words.first_step(starts[b])
            observations = snapshot(batch) if snapshot is not None else None
            view = SchedulerView(device=bed.device_state(), observations=observations)
            t0 = clock()
            decision = scheduler.decide(batch, view)
            spent = (clock() - t0) * 1000
            decision_ms.append(spent)
            deciding += spent
            options = _check(decision, batch, name)
            calls = list(zip(batch.call_ids, _tools(batch), options, strict=True))
            state = bed.residency()  # the noise-free cost is paid from the state before the step
            policy_ms = exact_policy_ms(bed, batch, decision)  # a deviation's counterfactual
            gpus = step_gpus(bed, batch, decision, view)
            hedges = dict(decision.hedges)
            key: tuple[Any, ...] = (b, options, state.gpu, state.host,
                                    tuple(sorted(hedges.items())))
            if gpus is not None:
                key = (*key, state.others, tuple(sorted(gpus.items())))
            if hedges:  # both runs of each hedged call (`hedging.simulated`; one GPU)
                check_hedges(hedges, decision.mapping, scheduler=f"scheduler {name!r}")
                runner = None if step_runner is None else functools.partial(
                    step_runner, bed, batch)
                hedged = run_hedged_step(bed, calls, hedges, bound=decision.hedge_bound,
                                         run=runner)
                cache[key], record = hedged.noise_free_ms, hedged.record
                hedge_calls += len(hedges)
                hedge_cost += hedged.noise_free_ms - hedged.unhedged_ms
                hedge_device += sum(h.loser_device_ms for h in hedge_outcomes(record))
            else:
                if key not in cache:
                    cache[key] = bed.makespan(calls, gpus=gpus)
                record = (bed.run_step(calls, gpus=gpus) if step_runner is None
                          else step_runner(bed, batch, calls))
            agentic.add(decision, exact_won_ms=None if policy_ms is None
                        else policy_ms - cache[key])
            scheduler.observe(batch, decision, record)
            if monitor is not None:
                monitor.record(record, batch=batch, decision=decision)
            noise_free += cache[key]
            loads += record.loads
            evictions += record.evictions
            steps += 1
            took += record.makespan_ms
            llm_calls += decision.llm_calls
            probes += int(decision.probe)
            reused += int(getattr(decision, "reused", False))
            fallbacks += sum(1 for c in record.calls if c.fell_back)
            final.update(zip(batch.call_ids, options, strict=True))
            if gpus is not None:
                devices.update(device_labels(batch.call_ids, options, gpus))
            preloaded.step(bed, record)
            parts, loaded = parts_after[b], preloaded.background
            think = sum(parts)
            delay = 0.0
            if decision.background:  # loads started with the step, beside its calls
                delay = run_background(
                    bed, decision.background,
                    beside_tools(_tools(batch), options, gpus, batch.call_ids), cache[key],
                    think, preloaded)
                noise_free += delay
                took += delay
            if words is not None:
                words.advance(record.makespan_ms + delay)
            # the agent's LLM turn (or the next request's arrival): idle devices
            last = r == rounds and b + 1 == len(batches)  # after it, no request comes
            between((think,) if last else parts,
                    None if last else starts.get((b + 1) % len(batches)),
                    preloads=preloaded.background == loaded)  # one loader
        round_spans.append(noise_free)
        walls.append(noise_free + (deciding if counted else 0.0))
        measured.append(took)
        if first_optimal is None and noise_free <= limits[r - 1]:
            first_optimal = r
        if on_round is not None:
            on_round(name, r)
    final_span = round_spans[-1]
    preloaded.finish()
    return SchedulerResult(
        scheduler=name,
        final_mapping=final,
        final_makespan_ms=final_span,
        optimal=final_span <= limits[-1],
        rounds_to_optimal=first_optimal,
        regret_ms=sum(max(0.0, s - best) for s, best in zip(round_spans, per_round, strict=True)),
        llm_calls=llm_calls,
        decision_ms_median=statistics.median(decision_ms),
        round_makespans_ms=round_spans,
        measured_makespans_ms=measured,
        probes=probes,
        fallbacks=fallbacks,
        decision_ms=decision_ms,
        round_wall_ms=walls,
        wall_regret_ms=sum(max(0.0, w - best) for w, best in zip(walls, per_round, strict=True)),
        reused=reused,
        agentic=agentic.summary(),
        evictions_per_step=evictions / steps if steps else 0.0,
        loads=loads,
        hedges=hedge_calls,
        hedge_cost_ms=hedge_cost,
        hedge_device_ms=hedge_device,
        idle_runs=idle.runs,
        idle_cut=idle.cut,
        idle_device_ms=idle.device_ms,
        final_devices=devices,
        preloads=preloaded.loads,
        preload_device_ms=preloaded.device_ms,
        preload_saved_ms=preloaded.saved_ms,
        preloads_wasted=preloaded.wasted + preloaded.cancelled,
        preload_wasted_ms=preloaded.wasted_ms,
        preloads_beside=preloaded.background,
        preload_delay_ms=preloaded.delay_ms,
        words=words.summary() if words is not None else None,
        below_reference=[r for r, (s, best) in enumerate(zip(round_spans, per_round,
                                                              strict=True), 1)
                         if s < best * BELOW_REFERENCE],
    )


@dataclass
class BenchResult:
    """All scenarios of one benchmark run."""

    scenarios: list[ScenarioResult]
    schedulers: list[str]
    rounds: int | None
    seed: int | None
    noise: float | None
    skipped: dict[str, str] = field(default_factory=dict)
    """Schedulers left out, with why (e.g. ``agentic`` without a configured LLM)."""
    decision_cost: DecisionCost = "measured"
    declare: Declare = field(default_factory=Declare)
    """What the tools declared (``exact``: the ground truth's solo profiles)."""


def run_benchmark(
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str] | None = None,
    *,
    rounds: int | None = None,
    seed: int | None = None,
    noise: float | None = None,
    monitor_factory: MonitorFactory | None = None,
    on_round: Callable[[Scenario, str, int], None] | None = None,
    step_runner: StepRunner | None = None,
    decision_cost: DecisionCost = "measured",
    clock: Callable[[], float] = time.perf_counter,
    declare: Declare | str = "exact",
    scheduler_options: SchedulerOptions | None = None,
) -> BenchResult:
    """Every scheduler (default: `default_schedulers`) on every scenario; ``declare``: what
    the tools declare to the schedulers (`bench.declare`; default ``exact``);
    ``scheduler_options``: as `run_scenario`."""
    check_decision_cost(decision_cost)
    mode = as_declare(declare)
    names = (
        default_schedulers(with_monitor=monitor_factory is not None)
        if schedulers is None
        else validate_scheduler_names(schedulers)
    )
    results = []
    for scenario in scenarios:
        hook = None if on_round is None else functools.partial(on_round, scenario)
        results.append(
            run_scenario(
                scenario, names, rounds=rounds, seed=seed, noise=noise,
                monitor_factory=monitor_factory, on_round=hook, step_runner=step_runner,
                decision_cost=decision_cost, clock=clock, declare=mode,
                scheduler_options=scheduler_options,
            )
        )
    return BenchResult(results, names, rounds, seed, noise, decision_cost=decision_cost,
                       declare=mode)
