"""The monitor policy on a machine with several GPUs: a twin of every GPU and a bounded
search for where each call runs (its option and its GPU).

The option search runs on the one-GPU twin as it always has. On a machine with several
GPUs, `place` then takes a few starting placements (the chosen mapping and the search's
next best, the HEFT and dmda placements, all on the GPU), each call on the GPU its start
names or the default rule's (`gpus.default_gpus`), simulates them in `gpus_twin` and moves
one call at a time (another GPU, or another option unless the options are fixed: a probe)
while that shortens the twin's makespan, at most ``max_evals`` simulations. The twin is a
noise-free `SimulatedTestbed` with one `GpuSpec` per device the view lists: its budget,
speed, what else holds it (VRAM and GPU share) and its resident weights, so a model warm
on one GPU is cheap there and cold elsewhere. It reads nothing a scheduler could not see.
With one GPU none of this runs.

>>> from langgraph_devsched.testbed import GpuSpec, ToolParams
>>> p = {"ocr": ToolParams(cpu_ms=900, gpu_ms=60, vram_mb=6000)}
>>> bed = SimulatedTestbed(p, gpus=[GpuSpec(vram_mb=8000), GpuSpec(vram_mb=8000, speed=2.0)])
>>> t = gpus_twin(p, bed.device_state(), oom_ms=20.0)
>>> done = place(t, ["a", "b"], ["ocr", "ocr"], [[("cpu", None), ("gpu_queued", 0),
...     ("gpu_queued", 1)]] * 2, [(("gpu_queued", 0), ("gpu_queued", 0))])
>>> done.placement, done.span_ms
((('gpu_queued', 1), ('gpu_queued', 0)), 60.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.gpu_workers import interchangeable_gpus
from langgraph_devsched.schedulers.policy.model import ContentionModel, one_model_each
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import BackgroundLoad, GpuSpec, SimulatedTestbed, ToolParams

Spot = tuple[DeviceOption, int | None]
"""Where one call runs: its option, and its GPU (None on the CPU)."""
Placement = tuple[Spot, ...]

MAX_EVALS = 192
"""Simulations per decision, divided by the batch size (at least `MIN_EVALS`)."""
MIN_EVALS = 24


def max_evals(n: int) -> int:
    """The simulations one decision may spend placing ``n`` calls on the GPUs."""
    return max(MIN_EVALS, MAX_EVALS // max(1, n))


def gpus_twin(
    params: Mapping[str, ToolParams], device: DeviceState, *, oom_ms: float,
    model: ContentionModel | None = None, residency: bool = True,
) -> SimulatedTestbed:
    """A noise-free testbed of every GPU the view lists (budget, speed, background, the
    resident weights that fit beside it), with the estimated tool parameters
    (``residency=False``: no weights, as for replaying warm runs)."""
    tools = one_model_each(params) if residency else {
        t: p.model_copy(update={"weights_mb": 0.0}) for t, p in params.items()}
    weights = {m: p.weights_mb for t, p in tools.items() if (m := p.model_name(t)) is not None}
    model = model or ContentionModel()
    specs = []
    for d in device.devices:
        budget = max(d.budget_mb, d.used_mb, 1.0)
        background = min(d.used_mb, budget)
        room = budget - background
        resident: list[str | tuple[str, float]] = []
        for warm in reversed([w for w in d.resident if w.side == "gpu"]):  # most recent first
            mb = weights.get(warm.model, warm.weights_mb)
            if mb <= room:
                room -= mb
                resident.insert(0, warm.model if warm.model in weights else (warm.model, mb))
        specs.append(GpuSpec(
            vram_mb=budget, speed=d.speed, name=d.name, resident=tuple(resident),
            background=BackgroundLoad(vram_mb=background,
                                      gpu_share=min(1.0, max(0.0, d.utilization)))))
    host = [w.model for w in device.resident if w.side == "cpu" and w.model in weights]
    return SimulatedTestbed(
        tools, gpus=specs, cpu_cores=max(1, device.cpu_cores), oom_detect_ms=oom_ms,
        resident={"cpu": host}, physics=model.physics, slice_overhead=model.slice_overhead,
        mem_bound=model.mem_bound,
        keep_warm={w.model for w in device.resident if w.keep_warm and w.side == "gpu"})


@dataclass(frozen=True)
class Placed:
    """The placement found, its twin makespan and how many simulations it took."""

    placement: Placement
    span_ms: float
    evals: int
    tried: Mapping[Placement, float] = field(default_factory=dict, compare=False)
    """Every placement simulated, with its twin makespan."""

    def options(self) -> tuple[DeviceOption, ...]:
        return tuple(o for o, _ in self.placement)

    def gpus(self, call_ids: Sequence[str]) -> dict[str, int]:
        return {c: g for c, (_, g) in zip(call_ids, self.placement, strict=True) if g is not None}


def place(
    bed: SimulatedTestbed, call_ids: Sequence[str], tools: Sequence[str],
    spots: Sequence[Sequence[Spot]], starts: Sequence[Placement], *,
    fixed_options: bool = False, evals: int | None = None,
    spent: Callable[[], bool] = lambda: False,
    observed: Callable[[Placement], float | None] | None = None,
) -> Placed:
    """The best placement found from ``starts`` (the first always simulated) by moving one
    call at a time to another of its ``spots`` (only to another GPU: ``fixed_options``),
    within ``evals`` simulations (default `max_evals`) and, past `MIN_EVALS` of them, until
    ``spent``. A placement that ran scores its ``observed`` mean makespan instead (the twin
    was wrong there, or right: either way the runs say it)."""
    limit = max_evals(len(call_ids)) if evals is None else evals
    alike = interchangeable_gpus(bed)
    spans: dict[Placement, float] = {}

    def span(p: Placement) -> float:
        seen = None if observed is None or p in spans else observed(p)
        if seen is not None:
            spans[p] = seen
        if p not in spans:
            gpus = {c: g for c, (_, g) in zip(call_ids, p, strict=True) if g is not None}
            spans[p] = bed.makespan(list(zip(call_ids, tools, (o for o, _ in p), strict=True)),
                                    gpus=gpus)
        return spans[p]

    def room() -> bool:  # ``spent`` counts only past the first MIN_EVALS simulations
        return len(spans) < limit and (len(spans) < MIN_EVALS or not spent())

    best = tuple(starts[0])
    best_span = span(best)
    for start in starts[1:]:
        if not room():
            break
        s = span(tuple(start))
        if s < best_span - _tol(best_span):
            best, best_span = tuple(start), s
    improved = True
    while improved and room():
        improved = False
        for i, here in enumerate(best):
            for spot in spots[i]:
                if spot == here or (fixed_options and spot[0] != here[0]):
                    continue
                if _mirror(best, i, spot, alike):
                    continue
                if not room():
                    break
                moved = (*best[:i], spot, *best[i + 1:])
                s = span(moved)
                if s < best_span - _tol(best_span):
                    best, best_span, improved = moved, s, True
    return Placed(best, best_span, len(spans), spans)


def _tol(span_ms: float) -> float:
    """An improvement smaller than this is none (float noise, not a better placement)."""
    return max(1e-9, 1e-9 * abs(span_ms))


def _mirror(p: Placement, i: int, spot: Spot, alike: list[int]) -> bool:
    """Whether moving call ``i`` to ``spot`` mirrors a move to (or a stay on) an alike GPU
    of lower index that no other call uses either: the same placement, two GPUs swapped."""
    _, g = spot
    if g is None:
        return False
    others = {h for j, (_, h) in enumerate(p) if j != i and h is not None}
    if g in others:
        return False
    return any(alike[h] == alike[g] and h not in others for h in range(g))
