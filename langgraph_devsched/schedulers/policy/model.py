"""The monitor policy's latency model: a twin of the machine built only from observations.

`estimate_params` turns what a scheduler may see for one tool (its declared hints and solo
profile, and the monitor's estimates) into `ToolParams`; `twin` puts them in a
`SimulatedTestbed` (the documented discrete-event model of GPU sharing, VRAM admission, OOM
fallback and CPU cores) sized from telemetry (`DeviceState`). The twin never reads a testbed's
hidden parameters: every number comes from hints, telemetry or executed records.

What is learned, per tool: the solo GPU time (runs with no GPU peer, background slowdown
undone), the solo CPU time (runs beside no other CPU call), each blended with the declared solo
profile while the two agree within the noise, the VRAM seen reserved, and the
OOM detection delay (fallback latency minus the CPU time). A side never measured takes the
declared solo profile, else a pessimistic guess (4x the other side), so it is only chosen
once a probe has measured it. A tool known not at all is guessed at `DEFAULT_MS` on the GPU
(the policy starts it there, see `policy.scheduler`); a CPU-only tool known not at all is
guessed at nothing (its device is forced, so an invented time would only set the step's
length).

Resident models: a tool's declared ``model``/``weights_mb`` and load times (``load_ms``, else
the load times the monitor saw on loading calls, else none) go into its estimate, and the
twin starts from the models `DeviceState.resident` says are warm, so it charges loads and
evictions like the testbed. The contention fit runs without them (it replays warm steps).

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.monitor.observations import Observations
>>> spec = ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=90, gpu_ms=30, transfer_ms=5))
>>> p = estimate_params("ocr", spec, Observations(step=0), bg_share=0.0)
>>> p.cpu_ms, p.gpu_ms, p.transfer_ms, p.vram_mb
(90.0, 25.0, 5.0, 500.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.batchsim import Physics
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.context import LoadContext
from langgraph_devsched.monitor.observations import (
    Observations,
    OptionEstimate,
    PlacementOutcome,
)
from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

UNKNOWN_FACTOR = 4.0
"""An unmeasured, undeclared side is guessed this many times slower than the known side."""
DEFAULT_MS = 100.0
DEFAULT_OOM_MS = 20.0
_MIN_MS = 1e-3


PRIOR_WEIGHT = 10.0
"""A declared solo time (a profiler's median over repeated runs) counts as this many samples
while the measurements agree with it."""
AGREE_WITHIN = 0.10
"""A measured mean within this fraction of the declared time (or 3 standard errors) agrees."""


MAX_CPU_SCALE = 4.0
"""A fitted correction of a declared CPU time stays within [1/4, 4] of the declaration."""


def _blend(declared: float | None, measured: tuple[float, int] | None, cv: float) -> float | None:
    """The declared solo time and the measured mean, weighted like samples, while the two
    agree (within `AGREE_WITHIN` or 3 standard errors); else the measurement alone (the
    declaration was wrong)."""
    if measured is None:
        return declared
    mean, count = measured
    if declared is None or declared <= 0:
        return mean
    if abs(mean - declared) > max(AGREE_WITHIN, 3.0 * cv / count**0.5) * declared:
        return mean
    return (PRIOR_WEIGHT * declared + count * mean) / (PRIOR_WEIGHT + count)


def _solo(
    estimates: Sequence[OptionEstimate], device: str, *, strict: bool = True
) -> tuple[float, int] | None:
    """Mean run time and count over the samples that ran with nothing else on their device.

    Not ``strict``, the least crowded context stands in when no call ran there alone (an
    upper bound, better than a guess when nothing is declared).
    """
    by_peers: dict[int, tuple[float, float]] = {}
    for e in estimates:
        if e.device != device or e.fallbacks:
            continue
        ctx = LoadContext.parse(e.context)
        peers = ctx.gpu if device == "gpu" else ctx.cpu
        if strict and peers:
            continue
        total, count = by_peers.get(peers, (0.0, 0.0))
        by_peers[peers] = (total + e.run_ms * e.count, count + e.count)
    if not by_peers:
        return None
    total, count = by_peers[min(by_peers)]
    return (total / count, int(count)) if count else None


@dataclass(frozen=True)
class _Seen:
    """What ``estimate_params`` reads from the observations for one tool and spec: the
    same for every share, thread count and CPU scale a fit tries (`_seen`)."""

    gpu: tuple[float, int] | None
    cpu: tuple[float, int] | None
    cv: float
    vram: float
    load: tuple[float, float]
    params: dict[tuple[float, float | None, int, float | None], ToolParams] = field(
        default_factory=dict, compare=False, repr=False)
    """`estimate_params`' answers from this snapshot, by (background share, share, threads,
    CPU scale): a fit asks the same few again and again (at most `MAX_PARAMS` kept)."""


MAX_PARAMS = 64


class _SeenCache:
    """`_Seen` per (tool, spec) for the one `Observations` last asked about (a frozen
    snapshot: a fit estimates each tool thousands of times from one snapshot); another
    snapshot clears it, so it holds one snapshot's tools at most."""

    def __init__(self) -> None:
        self.state: tuple[Observations | None, dict[tuple[str, int], Any]] = (None, {})

    def get(self, tool: str, spec: ToolDeviceSpec, obs: Observations) -> _Seen:
        state = self.state  # one read: a thread on another snapshot swaps in its own pair
        if state[0] is not obs:
            state = (obs, {})
            self.state = state
        table = state[1]
        hit = table.get((tool, id(spec)))
        if hit is not None and hit[0] is spec:
            return hit[1]
        seen = _seen(tool, spec, obs)
        if len(table) >= 4096:  # bounded even for a huge batch
            table.clear()
        table[(tool, id(spec))] = (spec, seen)
        return seen


def _seen(tool: str, spec: ToolDeviceSpec, obs: Observations) -> _Seen:
    own = obs.for_tool(tool)
    profile = spec.profile
    return _Seen(
        gpu=_solo(own, "gpu", strict=bool(profile and profile.gpu_ms is not None)),
        cpu=_solo(own, "cpu", strict=profile is not None and profile.cpu_ms is not None),
        cv=_noise(obs),
        vram=max(spec.vram_mb, obs.vram_seen_mb.get(tool, 0.0)),
        load=_load_times(tool, spec, obs),
    )


_SEEN = _SeenCache()


def estimate_params(
    tool: str, spec: ToolDeviceSpec, obs: Observations, *, bg_share: float,
    share: float | None = None, threads: int = 1, cpu_scale: float | None = None,
) -> ToolParams:
    """Best current estimate of ``tool``'s parameters from hints and observations.

    ``share`` and ``threads`` override the declared GPU share and the CPU threads (1) with
    fitted values (see `fit_contention`); ``cpu_scale`` corrects a declared CPU time that no
    solo run measured, as the fit found it from the runs beside other calls.
    """
    seen = _SEEN.get(tool, spec, obs)
    key = (bg_share, share, threads, cpu_scale)
    known = seen.params.get(key)
    if known is not None:
        return known
    params = _estimate(seen, spec, bg_share=bg_share, share=share, threads=threads,
                       cpu_scale=cpu_scale)
    if len(seen.params) < MAX_PARAMS:
        seen.params[key] = params
    return params


def _estimate(
    seen: _Seen, spec: ToolDeviceSpec, *, bg_share: float, share: float | None, threads: int,
    cpu_scale: float | None,
) -> ToolParams:
    share = spec.gpu_share if share is None else share
    profile = spec.profile
    transfer = profile.transfer_ms if profile else 0.0
    cv = seen.cv
    gpu_seen = seen.gpu
    if gpu_seen is not None:  # undo the background's slowdown of the compute phase
        slowdown = max(1.0, bg_share + share)
        gpu_seen = (max(0.0, gpu_seen[0] - transfer) / slowdown + transfer, gpu_seen[1])
    gpu_total = _blend(profile.gpu_ms if profile else None, gpu_seen, cv)
    gpu_compute = None if gpu_total is None else max(0.0, gpu_total - transfer)
    cpu_declared = profile.cpu_ms if profile else None
    cpu_seen = seen.cpu
    if cpu_seen is None and cpu_declared is not None and cpu_scale is not None:
        cpu_declared *= cpu_scale
    cpu = _blend(cpu_declared, cpu_seen, cv)
    if gpu_compute is None and cpu is None:
        # a CPU-only tool's time is forced, not chosen: it is not invented (near zero until
        # measured), so a guess never sets the step's length
        gpu_compute = DEFAULT_MS
        cpu = DEFAULT_MS * UNKNOWN_FACTOR if spec.gpu_capable else _MIN_MS
    elif gpu_compute is None:
        gpu_compute = (cpu or DEFAULT_MS) * UNKNOWN_FACTOR
    elif cpu is None:
        cpu = (gpu_compute + transfer) * UNKNOWN_FACTOR
    assert cpu is not None and gpu_compute is not None
    load_gpu, load_cpu = seen.load
    return ToolParams(
        cpu_ms=max(_MIN_MS, cpu), gpu_ms=gpu_compute, transfer_ms=transfer, vram_mb=seen.vram,
        gpu_share=share, cpu_threads=threads, model=spec.model, weights_mb=spec.weights_mb,
        load_gpu_ms=load_gpu, load_cpu_ms=load_cpu,
    )


def _load_times(tool: str, spec: ToolDeviceSpec, obs: Observations) -> tuple[float, float]:
    """Load time of the tool's model on (GPU, CPU): declared, else seen on loading calls."""
    if spec.model_name(tool) is None:
        return 0.0, 0.0
    seen = getattr(obs, "load_seen_ms", {}) or {}
    declared = spec.load_ms
    out = []
    for side in ("gpu", "cpu"):
        value = None if declared is None else getattr(declared, f"{side}_ms")
        if value is None:
            value = seen.get(f"{tool}|{side}")
        out.append(float(value or 0.0))
    return out[0], out[1]


def declared_error(tool: str, spec: ToolDeviceSpec, obs: Observations) -> float:
    """How wrong ``tool``'s declared profile proved where it was measured: the largest
    relative gap between a declared solo time and its solo measurement (0 while they agree
    within the noise, see `AGREE_WITHIN`). A profile wrong on one side may be as wrong on
    the side never measured: the policy then probes that side rather than trust it."""
    profile = spec.profile
    if profile is None:
        return 0.0
    own = obs.for_tool(tool)
    cv = _noise(obs)
    worst = 0.0
    for device, declared in (("gpu", profile.gpu_ms), ("cpu", profile.cpu_ms)):
        seen = _solo(own, device)
        if declared is None or declared <= 0 or seen is None:
            continue
        mean, count = seen
        gap = abs(mean - declared) / declared
        if gap > max(AGREE_WITHIN, 3.0 * cv / count**0.5):
            worst = max(worst, gap)
    return worst


def _noise(obs: Observations) -> float:
    cvs = [e.std_ms / e.run_ms for e in obs.estimates if e.count >= 2 and e.run_ms > 0]
    return sum(cvs) / len(cvs) if cvs else 0.0


def oom_detect_ms(obs: Observations, params: Mapping[str, ToolParams]) -> float:
    """The OOM detection delay seen in fallbacks (latency minus CPU time, count-weighted),
    shrunk towards the default (weighing as 5 samples): one noisy CPU time says little."""
    total, count = DEFAULT_OOM_MS * 5.0, 5.0
    for e in obs.estimates:
        if e.fallbacks and e.option == "gpu_now" and e.tool in params and (
                LoadContext.parse(e.context).cpu == 0):
            total += (e.latency_ms - params[e.tool].cpu_ms) * e.count
            count += e.count
    return max(0.0, total / count)


@dataclass(frozen=True)
class ContentionModel:
    """A contention physics the twin may run (`batchsim.Contention`, ``docs/physics.md``),
    with its one tunable: ``slice_overhead`` (time slicing) or ``mem_bound`` (bandwidth,
    one value for every tool)."""

    physics: Physics = "processor_sharing"
    slice_overhead: float = 0.0
    mem_bound: float = 0.5

    @property
    def label(self) -> str:
        if self.physics == "time_slicing" and self.slice_overhead:
            return f"time_slicing(overhead {self.slice_overhead:g})"
        if self.physics == "bandwidth":
            return f"bandwidth(mem_bound {self.mem_bound:g})"
        return self.physics


_CANDIDATES: tuple[tuple[Physics, tuple[float, ...]], ...] = (
    ("processor_sharing", (0.0,)),
    ("time_slicing", (0.0, 0.1)),
    ("idle_queue", (0.0,)),
    ("bandwidth", (0.25, 0.5, 1.0)),
)
"""The contention models the fit selects among, each physics with the values of its
tunable (time slicing: ``slice_overhead``; bandwidth: ``mem_bound``)."""
CANDIDATE_MODELS: tuple[ContentionModel, ...] = ()  # filled in below `_tuned`
SCREEN_MODELS = 2
"""A selection screens the current model (its joint moves) and this many other candidates
per refit: a whole screen (`CANDIDATE_MODELS`) is spread over a few decisions, so that none
pays all of it (issue 25)."""
GROUP_SCALES: tuple[float, ...] = (0.3, 0.5, 0.7, 0.85)
"""A group move scales the shares of every tool that shared the GPU together by these."""


def _tuned(physics: Physics, value: float) -> ContentionModel:
    if physics == "time_slicing":
        return ContentionModel(physics, slice_overhead=value)
    if physics == "bandwidth":
        return ContentionModel(physics, mem_bound=value)
    return ContentionModel(physics)


CANDIDATE_MODELS = tuple(_tuned(p, v) for p, values in _CANDIDATES for v in values)


def _on_grid(share: float) -> float:
    """The `SHARE_GRID` value nearest ``share``."""
    return min(SHARE_GRID, key=lambda v: (abs(v - share), v))


JOINT_UNTIL = 16
"""Joint moves of the current model's shares are taken at the selections of a shape's
first runs (1, 2, 4, 8: where the tool-by-tool fit from the declared shares is stuck); later
the fit has converged and a small joint gain would only unsettle it."""
SELECT_BELOW = 0.7
"""Another model replaces the current one only when its loss is below this fraction of the
current one's (the noise leaves every model some loss)."""


def twin(
    params: Mapping[str, ToolParams], device: DeviceState, *, oom_ms: float,
    residency: bool = True, model: ContentionModel | None = None,
) -> SimulatedTestbed:
    """A noise-free testbed with the estimated parameters, sized from telemetry, starting
    from the resident models telemetry lists (``residency=False``: no resident models),
    running the contention ``model`` (default: processor sharing)."""
    budget = max(device.vram_budget_mb, device.vram_used_mb, 1.0)
    background = min(device.vram_used_mb, budget)
    tools = one_model_each(params) if residency else {
        t: p.model_copy(update={"weights_mb": 0.0}) for t, p in params.items()}
    resident: dict[str, list[Any]] = {"gpu": [], "cpu": []}
    model = model or ContentionModel()
    if residency:
        known = {p.model_name(t): p for t, p in tools.items() if p.model_name(t) is not None}
        room = budget - background
        for warm in reversed(device.resident):  # the most recently used first
            if warm.side == "cpu":
                if warm.model in known:
                    resident["cpu"].insert(0, warm.model)
                continue
            mb = known[warm.model].weights_mb if warm.model in known else warm.weights_mb
            if mb <= room:
                room -= mb
                resident["gpu"].insert(0, warm.model if warm.model in known else (
                    warm.model, mb))
    return SimulatedTestbed(
        tools,
        vram_budget_mb=budget,
        cpu_cores=max(1, device.cpu_cores),
        background=BackgroundLoad(
            vram_mb=background,
            gpu_share=min(1.0, max(0.0, device.gpu_utilization)),
        ),
        oom_detect_ms=oom_ms,
        resident=resident,
        keep_warm={w.model for w in device.resident if w.keep_warm and w.side == "gpu"},
        physics=model.physics,
        slice_overhead=model.slice_overhead,
        mem_bound=model.mem_bound,
    )


def one_model_each(params: Mapping[str, ToolParams]) -> dict[str, ToolParams]:
    """The parameters with every tool of one model agreeing on its weights and load times
    (the first tool's), as the testbed requires."""
    first: dict[str, ToolParams] = {}
    out = {}
    for tool, p in params.items():
        model = p.model_name(tool)
        if model is None:
            out[tool] = p
            continue
        ref = first.setdefault(model, p)
        out[tool] = p if ref is p else p.model_copy(update={
            "weights_mb": ref.weights_mb, "load_gpu_ms": ref.load_gpu_ms,
            "load_cpu_ms": ref.load_cpu_ms})
    return out


def predict_makespans(
    bed: SimulatedTestbed, tools: Sequence[str], choices: Sequence[Sequence[DeviceOption]]
) -> list[float]:
    """Predicted makespan of every mapping of ``itertools.product(*choices)``, in order."""
    try:
        return [float(x) for x in bed.product_makespans(tools, choices)]
    except (AttributeError, ImportError):  # no batched simulator: one by one
        import itertools

        return [
            bed.makespan([(str(i), t, o) for i, (t, o) in enumerate(zip(tools, combo, strict=True))
                          ])
            for combo in itertools.product(*choices)
        ]


SHARE_GRID: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(2, 21))
THREAD_GRID: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
MAX_FIT_OUTCOMES = 12
FIT_CALLS = 96
"""The most executed placements fitted are those whose calls add up to this (at least 2)."""


@dataclass(frozen=True)
class ContentionFit:
    """Fitted GPU shares and CPU threads per tool (the contention the hints do not declare)."""

    shares: dict[str, float] = field(default_factory=dict)
    threads: dict[str, int] = field(default_factory=dict)
    complete: bool = True
    """False when a deadline stopped the fit before its passes were done."""
    resume_at: int = 0
    """The ``offset`` that resumes an incomplete fit at the tool it stopped before ..."""
    visits_left: int = 0
    """... and the ``visits`` (tool updates) it has left to do."""
    model: ContentionModel = field(default_factory=ContentionModel)
    """The contention model that explains the executed placements best."""
    selected_at: int = 0
    """The shape's executed runs when ``model`` was selected (0: not yet); the selection
    runs again once they have doubled."""
    losses: dict[str, float] = field(default_factory=dict)
    """The loss of each candidate model (by label) when the selection last ran."""
    cpu_scale: dict[str, float] = field(default_factory=dict)
    """Per tool whose declared CPU time no solo run measured, the factor its runs beside
    other calls ask of that time (see `fit_contention`)."""
    screen_left: tuple[int, ...] = ()
    """A selection in progress: the `CANDIDATE_MODELS` (indices) it has still to screen ..."""
    screen_best: tuple[float, int, tuple[tuple[str, float], ...]] | None = None
    """... and the best one screened so far: its loss over the current model's (each
    measured on the same evidence), its index and its share table."""


def _ordered_calls(
    tools: Sequence[str], outcome: PlacementOutcome
) -> list[tuple[str, str, DeviceOption, int]] | None:
    """The outcome's calls in batch order: (call id, tool, option, index into run_ms)."""
    queues: dict[str, list[tuple[DeviceOption, int]]] = {}
    for k, (tool, option) in enumerate(outcome.placement):
        queues.setdefault(tool, []).append((option, k))
    calls = []
    for i, tool in enumerate(tools):
        if not queues.get(tool):
            return None
        option, k = queues[tool].pop(0)
        calls.append((f"c{i}", tool, option, k))
    return calls


def fit_contention(
    tools: Sequence[str],
    specs: Mapping[str, ToolDeviceSpec],
    obs: Observations,
    device: DeviceState,
    *,
    oom_ms: float,
    start: ContentionFit | None = None,
    passes: int = 2,
    deadline: Callable[[], bool] | None = None,
    offset: int = 0,
    visits: int | None = None,
    sweep: bool = False,
    screen: int | None = None,
) -> ContentionFit:
    """Fit each tool's GPU share and CPU threads so the twin reproduces the executed
    placements of this batch shape (mean per-call run times and latencies, relative squared
    error; not the
    makespans, which under noise are maxima and biased upwards).

    Coordinate descent over `SHARE_GRID` and `THREAD_GRID`; a parameter that no executed
    placement exercises (the tool never shared its device) keeps its start value. A tool's
    whole grid is scored in one batch (every executed placement under every grid value, by
    the batched simulator). When ``deadline()`` turns true the fit stops between two tools
    (``complete=False``; each step only lowers the loss, so what it has is consistent);
    ``offset`` rotates the tool order
    and ``visits`` (default: ``passes`` times the tools) bounds the tool updates, so that a
    fit resumed later with its ``resume_at`` and ``visits_left`` finishes the work.

    ``sweep`` (a warm refit from ``start``): instead of the tool-by-tool passes, a few
    steepest-descent moves (`_sweep`), each scoring every fitted parameter's grid
    neighbours in one batched simulation. ``screen``: a contention-model selection screens
    this many candidates besides the current model per call (``complete=False`` until it is
    through; the policy passes `SCREEN_MODELS`), None: all of them at once.
    """
    outcomes = sorted(
        (o for o in obs.outcomes_for(tuple(tools)) if o.count and len(o.run_ms) == len(tools)),
        key=lambda o: (-o.count, o.steps_since),
    )[:max(2, min(MAX_FIT_OUTCOMES, FIT_CALLS // max(1, len(tools))))]
    shares = dict(start.shares) if start else {}
    threads = dict(start.threads) if start else {}
    cpu_scale = dict(start.cpu_scale) if start else {}
    runs = sum(o.count for o in obs.outcomes_for(tuple(tools)))
    plans = [(o, c) for o in outcomes if (c := _ordered_calls(tools, o)) is not None]
    gpu_shared, cpu_shared = set(), set()
    for _, calls in plans:
        on_gpu = [t for _, t, o, _ in calls if is_gpu(o)]
        on_cpu = [t for _, t, o, _ in calls if o == "cpu"]
        if len(on_gpu) > 1 or (on_gpu and device.gpu_utilization > 0):
            gpu_shared.update(on_gpu)
        if len(on_cpu) > 1:
            cpu_shared.update(on_cpu)
    if not plans or not (gpu_shared or cpu_shared):
        return ContentionFit(shares, threads, model=start.model if start else ContentionModel(),
                             selected_at=start.selected_at if start else 0,
                             cpu_scale=cpu_scale)
    distinct = sorted(set(tools))

    def estimate(t: str) -> ToolParams:
        return estimate_params(t, specs[t], obs, bg_share=device.gpu_utilization,
                               share=shares.get(t), threads=threads.get(t, 1),
                               cpu_scale=cpu_scale.get(t))

    params = {t: estimate(t) for t in distinct}

    from langgraph_devsched.batchsim import mapping_codes, require_numpy

    np = require_numpy()
    n = len(tools)
    plan_codes = mapping_codes([[o for _, _, o, _ in calls] for _, calls in plans], n)
    seen_run = np.array([[o.run_ms[k] for _, _, _, k in calls] for o, calls in plans])
    seen_lat = np.array([[o.latency_ms[k] if len(o.latency_ms) > k else 0.0
                          for _, _, _, k in calls] for o, calls in plans])
    weight = np.array([min(o.count, 5) for o, _ in plans], dtype=np.float64)
    fields = ("cpu_ms", "gpu_ms", "gpu_share", "cpu_threads")

    def losses(tool: str, table: dict[str, Any], values: Sequence[Any]) -> list[float]:
        """The loss with ``table[tool]`` set to each of ``values``: every plan under every
        value simulated in one batch (`SimulatedTestbed.call_times`)."""
        saved = table.get(tool)
        variants = []
        for v in values:
            table[tool] = v
            variants.append(estimate(tool))
        if saved is None:
            table.pop(tool, None)
        else:
            table[tool] = saved
        bed = twin(params, device, oom_ms=oom_ms, residency=False, model=current[0])
        g, pn = len(values), len(plans)
        cols = [i for i, t in enumerate(tools) if t == tool]
        rows: dict[str, Any] = {}
        for f in fields:
            base = np.array([getattr(params[t], f) for t in tools], dtype=np.float64)
            grid = np.tile(base, (g * pn, 1))
            per_value = np.repeat([float(getattr(p, f)) for p in variants], pn)
            grid[:, cols] = per_value[:, None]
            rows[f] = grid
        starts, ends = bed.call_times(tools, np.tile(plan_codes, (g, 1)), rows=rows)
        return scored(starts, ends, g)

    def scored(starts: Any, ends: Any, g: int) -> list[float]:
        pn = len(plans)
        run = (ends - starts).reshape(g, pn, n)
        lat = ends.reshape(g, pn, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            err_run = np.where(seen_run > 0, (run / seen_run - 1.0) ** 2, 0.0)
            err_lat = np.where(seen_lat > 0, (lat / seen_lat - 1.0) ** 2, 0.0)
        total = ((err_run + err_lat).sum(axis=2) * weight).sum(axis=1)
        return [float(x) for x in total]

    def loss_of(table: Mapping[str, float], model: ContentionModel) -> float:
        """The loss of the executed placements with ``table``'s shares under ``model``."""
        here = {t: estimate_params(t, specs[t], obs, bg_share=device.gpu_utilization,
                                   share=table.get(t), threads=threads.get(t, 1),
                                   cpu_scale=cpu_scale.get(t))
                for t in distinct}
        bed = twin(here, device, oom_ms=oom_ms, residency=False, model=model)
        starts, ends = bed.call_times(tools, plan_codes)
        return scored(starts, ends, 1)[0]

    def late() -> bool:
        return deadline is not None and deadline()

    current = [start.model if start else ContentionModel()]
    selected_at = start.selected_at if start else 0

    def best_of(tool: str, table: dict[str, Any], current: Any, grid: Sequence[Any]) -> None:
        """Set ``table[tool]`` to the grid value with the lowest loss (ties: nearest
        ``current``)."""
        scored = [(round(x, 9), abs(v - current), v)
                  for x, v in zip(losses(tool, table, grid), grid, strict=True)]
        table[tool] = min(scored)[2]
        params[tool] = estimate(tool)

    def table_losses(tables: Sequence[Mapping[str, float]], models: Sequence[ContentionModel]
                     ) -> list[list[float]]:
        """The loss of each share table under each of ``models``, all simulated in one
        batch (each row under its model's physics; the tables' parameter rows are built
        once for every model)."""
        g, pn = len(tables), len(plans)
        beds = [twin(params, device, oom_ms=oom_ms, residency=False, model=model)
                for model in models]
        key = tuple(tuple(sorted(t.items())) for t in tables)
        rows = table_rows.get(key)
        if rows is None:
            rows = {f: np.empty((g * pn, n)) for f in fields}
            for k, table in enumerate(tables):
                here = {t: estimate_params(t, specs[t], obs, bg_share=device.gpu_utilization,
                                           share=table.get(t), threads=threads.get(t, 1),
                                           cpu_scale=cpu_scale.get(t))
                        for t in distinct}
                for f in fields:
                    rows[f][k * pn:(k + 1) * pn, :] = [float(getattr(here[t], f))
                                                       for t in tools]
            table_rows.clear()
            table_rows[key] = rows
        k = len(models)
        starts, ends = beds[0].call_times(
            tools, np.tile(plan_codes, (g * k, 1)),
            rows={f: np.tile(v, (k, 1)) for f, v in rows.items()},
            models=[b.contention(tools) for b in beds], groups=np.repeat(np.arange(k), g * pn))
        flat = scored(starts, ends, g * k)
        return [flat[i * g:(i + 1) * g] for i in range(k)]

    table_rows: dict[Any, dict[str, Any]] = {}

    # a declared CPU time that no solo run measured (the tool always shared the CPU):
    # corrected from its runs beside other calls, through the twin's own core sharing (what
    # it predicts for those very steps). Not the GPU side: there a wrong time and a wrong
    # contention physics look alike (scaling GPU times too lost `parallel_llm_colocated`
    # under idle_queue, 1.06x, with exact profiles)
    unsolo = {t for t in cpu_shared if (p := specs[t].profile) is not None
              and p.cpu_ms is not None and _solo(obs.for_tool(t), "cpu") is None}
    on_cpu = plan_codes == 2
    cv = _noise(obs)

    def rescale_cpu(tool: str) -> None:
        """Scale the tool's declared CPU time by what its CPU runs ask of it (measured over
        predicted run times, runs-weighted, times the current scale) where that disagrees
        with the declaration like a measurement does (`AGREE_WITHIN` or 3 standard
        errors), else by the two blended like `_blend` blends them."""
        bed = twin(params, device, oom_ms=oom_ms, residency=False, model=current[0])
        starts, ends = bed.call_times(tools, plan_codes)
        cols = [j for j, t in enumerate(tools) if t == tool]
        mask = on_cpu[:, cols] * weight[:, None]
        predicted = float(((ends - starts)[:, cols] * mask).sum())
        count = float(mask.sum())
        if predicted <= 0 or count <= 0:
            return
        # the prediction is about linear in the declared time
        asked = cpu_scale.get(tool, 1.0) * float((seen_run[:, cols] * mask).sum()) / predicted
        if abs(asked - 1.0) <= max(AGREE_WITHIN, 3.0 * cv / count**0.5):
            asked = (PRIOR_WEIGHT + count * asked) / (PRIOR_WEIGHT + count)
        cpu_scale[tool] = min(MAX_CPU_SCALE, max(1.0 / MAX_CPU_SCALE, asked))
        params[tool] = estimate(tool)

    cores = max(1, device.cpu_cores)
    thread_grid = [n for n in THREAD_GRID if n <= cores]

    def variant_losses(variants: Sequence[Mapping[str, ToolParams]]) -> list[float]:
        """The loss with each variant's tools' parameters in place of ``params`` (the
        others as they are), every plan under every variant in one batch."""
        g, pn = len(variants), len(plans)
        bed = twin(params, device, oom_ms=oom_ms, residency=False, model=current[0])
        rows: dict[str, Any] = {}
        for f in fields:
            base = np.array([float(getattr(params[t], f)) for t in tools])
            grid = np.tile(base, (g, 1))
            for k, variant in enumerate(variants):
                for j, t in enumerate(tools):
                    if t in variant:
                        grid[k, j] = float(getattr(variant[t], f))
            rows[f] = np.repeat(grid, pn, axis=0)
        starts, ends = bed.call_times(tools, np.tile(plan_codes, (g, 1)), rows=rows)
        return scored(starts, ends, g)

    def rescale_all() -> None:
        """`rescale_cpu` of every such tool at once, from one simulation of the fit."""
        bed = twin(params, device, oom_ms=oom_ms, residency=False, model=current[0])
        starts, ends = bed.call_times(tools, plan_codes)
        for tool in sorted(unsolo):
            cols = [j for j, t in enumerate(tools) if t == tool]
            mask = on_cpu[:, cols] * weight[:, None]
            predicted = float(((ends - starts)[:, cols] * mask).sum())
            count = float(mask.sum())
            if predicted <= 0 or count <= 0:
                continue
            asked = cpu_scale.get(tool, 1.0) * float((seen_run[:, cols] * mask).sum()) / (
                predicted)
            if abs(asked - 1.0) <= max(AGREE_WITHIN, 3.0 * cv / count**0.5):
                asked = (PRIOR_WEIGHT + count * asked) / (PRIOR_WEIGHT + count)
            cpu_scale[tool] = min(MAX_CPU_SCALE, max(1.0 / MAX_CPU_SCALE, asked))
        params.update({t: estimate(t) for t in unsolo})

    if sweep and start is not None:
        if unsolo:
            rescale_all()
        _sweep(distinct, gpu_shared, cpu_shared, shares, threads, specs, thread_grid,
               estimate, params, variant_losses, len(plans) * n)
        total = 0
    else:
        total = passes * len(distinct) if visits is None else visits
    for done in range(total):
        position = offset + done
        tool = distinct[position % len(distinct)]
        if done and late():
            return ContentionFit(shares, threads, complete=False, resume_at=position,
                                 visits_left=total - done, model=current[0],
                                 selected_at=selected_at, cpu_scale=cpu_scale)
        if tool in gpu_shared:
            best_of(tool, shares, shares.get(tool, specs[tool].gpu_share), SHARE_GRID)
        if tool in cpu_shared:
            best_of(tool, threads, threads.get(tool, 1), [n for n in THREAD_GRID if n <= cores])
        if tool in unsolo:
            rescale_cpu(tool)
    if not gpu_shared:
        return ContentionFit(shares, threads, model=current[0], selected_at=selected_at,
                             cpu_scale=cpu_scale)
    screening = start is not None and bool(start.screen_left)
    if not screening and selected_at and runs < 2 * selected_at:  # selected on half or more
        return ContentionFit(shares, threads, model=current[0], selected_at=selected_at,
                             losses=dict(start.losses) if start else {}, cpu_scale=cpu_scale)
    if late():  # the selection runs at the next refit
        return ContentionFit(shares, threads, complete=False, model=current[0],
                             selected_at=selected_at, cpu_scale=cpu_scale,
                             screen_left=start.screen_left if start else (),
                             screen_best=start.screen_best if start else None)
    # which contention model explains the executed placements best: the current one as
    # fitted above (and its shares scaled together: a joint move), each other screened at
    # each value of its tunable (`CANDIDATE_MODELS`) from
    # the fitted and the declared shares, and those scaled together (`GROUP_SCALES`);
    # `SCREEN_MODELS` others a refit, each against the current model on the same evidence
    fitted = dict(shares)
    mine = current[0]
    found = dict(start.losses) if screening and start is not None else {}
    left = [i for i in (start.screen_left if screening and start is not None else
                        range(len(CANDIDATE_MODELS))) if CANDIDATE_MODELS[i] != mine]
    since = selected_at if screening else max(1, runs)
    screened = start.screen_best if screening and start is not None else None
    group = sorted(gpu_shared)
    starts: list[dict[str, float]] = [fitted, {}]
    tables = list(starts) + [
        {**t, **{g: _on_grid(t.get(g, specs[g].gpu_share) * f) for g in group}}
        for t in starts for f in GROUP_SCALES]
    step = len(left) if screen is None else max(1, screen)
    chunk, left = left[:step], left[step:]
    # the current model and this refit's candidates in one batched simulation
    ours, *theirs = table_losses(tables, [mine, *(CANDIDATE_MODELS[i] for i in chunk)])
    found[mine.label] = ours[0]
    for loss, table in zip(ours[1:], tables[1:], strict=True):  # joint moves
        if runs < JOINT_UNTIL and loss < found[mine.label] - 1e-9:
            found[mine.label], fitted = loss, dict(table)
    for index, losses_here in zip(chunk, theirs, strict=True):  # a bounded screen
        model = CANDIDATE_MODELS[index]
        found[model.label] = min(losses_here)
        for loss, table in zip(losses_here, tables, strict=True):
            ours_now = found[mine.label]
            ratio = loss / ours_now if ours_now > 0 else (math.inf if loss > 0 else 1.0)
            if screened is None or ratio < screened[0] - 1e-12:
                screened = (ratio, index, tuple(sorted(table.items())))
    if left:
        return ContentionFit(fitted, threads, complete=False, model=mine, selected_at=since,
                             losses=found, cpu_scale=cpu_scale, screen_left=tuple(left),
                             screen_best=screened)
    if screened is None or screened[0] >= SELECT_BELOW:
        return ContentionFit(fitted, threads, model=mine, selected_at=since,
                             losses=found, cpu_scale=cpu_scale)
    best = (screened[0], CANDIDATE_MODELS[screened[1]], dict(screened[2]))
    _, model, table = best
    shares.clear()
    shares.update(table)
    current[0] = model
    params.update({t: estimate(t) for t in distinct})
    complete = True
    for tool in group:  # the selected model's shares, tool by tool
        if late():
            complete = False
            break
        best_of(tool, shares, shares.get(tool, specs[tool].gpu_share), SHARE_GRID)
    found[model.label] = min(found.get(model.label, math.inf), loss_of(shares, model))
    return ContentionFit(dict(shares), threads, complete=complete, model=model,
                         selected_at=since, losses=found, cpu_scale=cpu_scale)


SWEEP_STEPS = 2
"""A warm refit's move changes a share by at most this many `SHARE_GRID` steps, a thread
count by one `THREAD_GRID` step ..."""
SWEEP_CALLS = 3
"""... and it makes at most this many moves (one batched simulation each) ..."""
SWEEP_CELLS = 16384
"""... and no move past the first once the moves simulated this many calls in all (an
8-call batch with 12 executed placements: 3 moves; 16 calls: 1)."""


def _near(grid: Sequence[Any], value: Any, steps: int) -> list[Any]:
    """The grid values within ``steps`` of the one nearest ``value``."""
    i = min(range(len(grid)), key=lambda k: (abs(grid[k] - value), grid[k]))
    return list(grid[max(0, i - steps):i + steps + 1])


def _sweep(
    distinct: Sequence[str], gpu_shared: set[str], cpu_shared: set[str],
    shares: dict[str, float], threads: dict[str, int], specs: Mapping[str, ToolDeviceSpec],
    thread_grid: Sequence[int], estimate: Callable[[str], ToolParams],
    params: dict[str, ToolParams], variant_losses: Callable[
        [Sequence[Mapping[str, ToolParams]]], list[float]], cells: int,
) -> None:
    """A warm refit (``fit_contention(sweep=True)``): steepest descent, at most
    `SWEEP_CALLS` moves. Each move tries every fitted share and thread count at its grid
    neighbours (`SWEEP_STEPS`), all in one batch, and takes the one that lowers the loss
    most (ties: the smallest change, then the tool's name); it stops when none does, or
    before a move that would take the simulated calls past `SWEEP_CELLS` (``cells``: the
    calls a variant simulates, its plans times the batch's calls; the first move always
    runs). The loss never rises."""
    spent = 0
    for _ in range(SWEEP_CALLS):
        moves: list[tuple[str, dict[str, Any], Any, Any]] = []
        for tool in distinct:
            if tool in gpu_shared:
                now = shares.get(tool, specs[tool].gpu_share)
                moves += [(tool, shares, v, now) for v in _near(SHARE_GRID, now, SWEEP_STEPS)
                          if v != now]
            if tool in cpu_shared:
                now_t = threads.get(tool, 1)
                moves += [(tool, threads, v, now_t) for v in _near(thread_grid, now_t, 1)
                          if v != now_t]
        if not moves or (spent and spent + (len(moves) + 1) * cells > SWEEP_CELLS):
            return
        spent += (len(moves) + 1) * cells
        variants: list[Mapping[str, ToolParams]] = [{}]
        for tool, table, value, _ in moves:
            saved = table.get(tool)
            table[tool] = value
            variants.append({tool: estimate(tool)})
            if saved is None:
                table.pop(tool, None)
            else:
                table[tool] = saved
        here, *after = variant_losses(variants)
        loss, _, _, k = min((round(x, 9), abs(m[2] - m[3]), m[0], k)
                            for k, (x, m) in enumerate(zip(after, moves, strict=True)))
        if loss >= here - 1e-9:
            return
        tool, table, value, _ = moves[k]
        table[tool] = value
        params[tool] = estimate(tool)
