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
(the policy starts it there, see `policy.scheduler`), or on the side its ``device_prior``
names; a CPU-only tool known not at all is
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.batchsim import Physics
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.context import LoadContext
from langgraph_devsched.monitor.observations import (
    Observations,
    OptionEstimate,
)
from langgraph_devsched.options import DeviceOption
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


def solo_ms(
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
        gpu=solo_ms(own, "gpu", strict=bool(profile and profile.gpu_ms is not None)),
        cpu=solo_ms(own, "cpu", strict=profile is not None and profile.cpu_ms is not None),
        cv=noise_cv(obs),
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
    fitted values (see `contention_fit.fit_contention`); ``cpu_scale`` corrects a declared
    CPU time that no solo run measured, as the fit found it from the runs beside other calls.
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
        # measured), so a guess never sets the step's length; a tool that may take either
        # side starts on the side its prior names (`device_prior`: the GPU by default)
        gpu_compute, cpu = _guess(spec)
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


def _guess(spec: ToolDeviceSpec) -> tuple[float, float]:
    """The GPU and CPU times of a tool known not at all: `DEFAULT_MS` on the side its
    ``device_prior`` names (the GPU without one) and `UNKNOWN_FACTOR` times that on the
    other; both `DEFAULT_MS` for ``neutral``; a CPU-only tool's CPU time near zero.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> _guess(ToolDeviceSpec()), _guess(ToolDeviceSpec(device_prior="cpu"))
    ((100.0, 400.0), (400.0, 100.0))
    """
    if not spec.gpu_capable:
        return DEFAULT_MS, _MIN_MS
    if spec.device_prior == "cpu":
        return DEFAULT_MS * UNKNOWN_FACTOR, DEFAULT_MS
    if spec.device_prior == "neutral":
        return DEFAULT_MS, DEFAULT_MS
    return DEFAULT_MS, DEFAULT_MS * UNKNOWN_FACTOR


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
    cv = noise_cv(obs)
    worst = 0.0
    for device, declared in (("gpu", profile.gpu_ms), ("cpu", profile.cpu_ms)):
        seen = solo_ms(own, device)
        if declared is None or declared <= 0 or seen is None:
            continue
        mean, count = seen
        gap = abs(mean - declared) / declared
        if gap > max(AGREE_WITHIN, 3.0 * cv / count**0.5):
            worst = max(worst, gap)
    return worst


def noise_cv(obs: Observations) -> float:
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
