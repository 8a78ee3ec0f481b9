"""How the monitor policy scores a mapping: the twin's predicted makespan, a measurement
where an executed placement shows the twin visibly wrong, and the reload its evictions cost
later steps (`eviction`). Measurement noise is kept apart from model error: a
mapping's own runs say how far its measurement may sit from the prediction
(docs/monitor.md, "The monitor policy", point 4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from langgraph_devsched.monitor.observations import PlacementOutcome
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.testbed import SimulatedTestbed

Mapping_ = tuple[DeviceOption, ...]


class TwinScores:
    """Scores of mappings on the twin, in batches, cached: the predicted makespan, or the
    observed one where an executed placement shows the model visibly wrong, plus the reload
    its evictions cost later steps (`eviction`)."""

    def __init__(
        self, bed: SimulatedTestbed, tools: list[str], outcomes: Sequence[PlacementOutcome],
        noise: float, override_floor: float, *, warm: SimulatedTestbed | None = None,
        reload: Callable[[Sequence[str]], float] | None = None,
    ) -> None:
        self.bed = bed
        self.reload = reload
        """The later steps' reload cost of evicting these resident models (None: no models
        resident, nothing to evict)."""
        self.reloads: dict[Mapping_, float] = {}
        """Per scored mapping with evictions, the reload part of its score."""
        self.warm = warm
        """The twin without resident models: what the (warm) observations are compared with;
        an override keeps the twin's load and eviction cost on top."""
        self.tools = tools
        self.seen = {canon(o.placement): o for o in outcomes if o.count}
        self._by_mapping = _by_mapping(tools, self.seen)
        measured = measurement_noise(outcomes, noise)
        self.noise = max(measured, min(noise, MAX_SPREAD_RATIO * measured))
        """The measurement noise: the relative spread of repeated runs of one mapping
        (model error cannot widen it), else the per-call estimates' pooled spread; raised
        towards the pooled spread by at most `MAX_SPREAD_RATIO`, because a makespan is the
        largest of several noisy calls and spreads less than each of them."""
        self.override_floor = override_floor
        self.values: dict[Mapping_, float] = {}
        self.observed: dict[Mapping_, float] = {}
        """The observed makespan of the executed mappings (2+ runs), for near-ties."""

    def __call__(self, mappings: Sequence[Mapping_]) -> list[float]:
        preds = self.bed.mapping_makespans(self.tools, mappings).tolist()
        seens = [None if not self.seen else (
            self._by_mapping.get(m) if self._by_mapping is not None
            else self.seen.get(canon(zip(self.tools, m, strict=True)))) for m in mappings]
        warm = preds
        if self.warm is not None:  # only executed mappings are compared with it
            ran = [k for k, seen in enumerate(seens) if seen is not None]
            warm = [0.0] * len(mappings)
            if ran:
                for k, ms in zip(ran, self.warm.mapping_makespans(
                        self.tools, [mappings[k] for k in ran]).tolist(), strict=True):
                    warm[k] = ms
        out = []
        for m, pred, base, seen in zip(mappings, preds, warm, seens, strict=True):
            score = pred
            if seen is not None:
                # the model pools every call's samples and estimates the noise-free makespan;
                # an executed placement overrides it only where the model is visibly wrong.
                # Its makespan is read as the largest mean call latency: the mean of noisy
                # makespans (maxima) would be biased upwards.
                seen_ms = observed_makespan(seen)
                if seen.count >= 2:
                    self.observed[m] = seen_ms
                tolerance = override_tolerance(seen, self.noise, self.override_floor)
                if abs(seen_ms - base) > tolerance * max(base, 1e-9):
                    score = seen_ms if self.warm is None else seen_ms + (pred - base)
            self.values[m] = score
            out.append(score)
        if self.reload is not None:
            evicted = self.bed.mapping_evictions(self.tools, mappings)
            for k, (m, models) in enumerate(zip(mappings, evicted, strict=True)):
                extra = self.reload(models) if models else 0.0
                if extra > 0:
                    self.reloads[m] = extra
                    self.values[m] += extra
                    out[k] += extra
        return out

    def makespan(self, m: Mapping_) -> float:
        """A scored mapping's makespan score, without the reload of its evictions."""
        return self.values.get(m, 0.0) - self.reloads.get(m, 0.0)

    def peek(self, m: Mapping_) -> float:
        """``m``'s score, kept only where it was scored already: a question from outside
        the policy (the agentic scheduler pricing an answer) leaves the policy's own
        reckoning as it was, so that the policy decides next what it would have decided
        alone (its near-ties are read from these scores)."""
        if m in self.values:
            return self.values[m]
        try:
            return self([m])[0]
        finally:
            self.values.pop(m, None)
            self.reloads.pop(m, None)
            self.observed.pop(m, None)

    def score(self, mappings: Sequence[Mapping_]) -> None:
        """Score those not scored yet."""
        todo = [m for m in dict.fromkeys(mappings) if m not in self.values]
        if todo:
            self(todo)


RESOLUTION = 0.002
"""Below this relative gap a repeated measurement never overrides the twin (float and
rounding differences, not evidence)."""


MAX_SPREAD_RATIO = 2.0
"""How far the per-call spread may raise the makespans' spread as the measurement noise:
with several calls ending together the makespan's spread is about half a call's (seen:
5 % measured under 10 % noise, so a 5 % noisy mean overrode the twin's right prediction of
the optimum); the per-call spread alone also carries the contention contexts' differences
(up to 0.35 at zero noise), hence the cap."""


PRIOR_RUNS = 4.0
"""The pooled noise counts as this many degrees of freedom in a mapping's own spread."""


def observed_makespan(outcome: PlacementOutcome) -> float:
    """An executed placement's makespan as its largest mean call latency (the mean of noisy
    makespans, maxima, would be biased upwards)."""
    return max(outcome.latency_ms) if outcome.latency_ms else outcome.makespan_ms


def measurement_noise(outcomes: Sequence[PlacementOutcome], pooled: float) -> float:
    """The runs-weighted relative spread of the makespans of executed mappings run at least
    twice (each mapping against its own mean), else ``pooled``."""
    total = weight = 0.0
    for o in outcomes:
        if o.count >= 2 and o.makespan_ms > 0:
            total += (o.count - 1) * (o.std_ms / o.makespan_ms) ** 2
            weight += o.count - 1
    return math.sqrt(total / weight) if weight else pooled


def override_tolerance(seen: PlacementOutcome, noise: float, floor: float) -> float:
    """How far an executed mapping's measured makespan may sit from the twin's prediction
    before it overrides it: 3 standard errors of its own measurements. The relative spread
    is the mapping's own over its runs, shrunk towards ``noise`` (`measurement_noise`) by
    `PRIOR_RUNS` (two runs say little of their spread); a single run: 3 times ``noise`` (at
    least ``floor``)."""
    if seen.count >= 2 and seen.makespan_ms > 0:
        dof = seen.count - 1.0
        own = seen.std_ms / seen.makespan_ms
        cv = math.sqrt((dof * own**2 + PRIOR_RUNS * noise**2) / (dof + PRIOR_RUNS))
        return max(RESOLUTION, 3.0 * cv / math.sqrt(seen.count))
    return max(floor, 3.0 * noise)


def _by_mapping(
    tools: Sequence[str], seen: dict[tuple[tuple[str, str], ...], PlacementOutcome]
) -> dict[Mapping_, PlacementOutcome] | None:
    """The executed placements by their mapping in ``tools``' call order: the same lookup
    as `canon` of each scored mapping, without sorting one per mapping; None when a tool
    occurs twice (then several call orders share one placement)."""
    if len(set(tools)) != len(tools):
        return None
    out: dict[Mapping_, PlacementOutcome] = {}
    for placement, outcome in seen.items():
        options = dict(placement)
        if len(placement) == len(tools) and options.keys() == set(tools):
            out[tuple(options[t] for t in tools)] = outcome  # type: ignore[misc]
    return out


def canon(pairs: Any) -> tuple[tuple[str, str], ...]:
    """A placement as sorted (tool, option) pairs: the same for every order of the calls."""
    return tuple(sorted((str(t), str(o)) for t, o in pairs))
