"""The monitor policy: a deterministic scheduler that reads only hints and the monitor.

For a batch it estimates every tool's parameters from its declared hints and the monitor's
observations (`model`), predicts makespans of joint mappings on a twin of the
machine and takes ``min(candidates, key=(score, index))``. The candidates come from
`search.search_mappings`: every mapping while that is cheap (``exact_limit``), branch and
bound on the twin's lower bounds up to ``bound_limit`` mappings, beyond that a local search
from seeds (the batch's last mapping, its executed placements, the HEFT and dmda mappings,
all-CPU and all-queued) within ``max_decision_ms`` on ``clock``; it never returns worse than
its best seed. A mapping already executed scores its observed mean makespan when that
disagrees with the prediction beyond the noise (the model was wrong there); otherwise the
prediction (which pools every call's samples) is trusted.

**Reuse.** While nothing the decision was made from has moved — the calls' hints, the
telemetry bucket, the tools' latency evidence (`reuse.ChangeDetector`: no sample outside
its noise, and fewer than twice the samples the decision was made from), no probe pending,
the contention fit settled or, while it still learns, the same mapping chosen twice in a
row — the last decision of the batch
(its tools in call order) is taken again at once, marked ``Decision(reused=True)``; it is
refreshed after ``refresh_after`` reuses. Per-shape tables (fits, last decisions) keep the
``max_shapes`` most recently used shapes.

Exploration: the monitor's hints (unknown device, symmetric, swap) name what was never
measured. The policy turns a hint into a *probe* — the chosen mapping with that one change —
when the shape's probe budget is not spent, the probe's placement was never executed, and its
predicted extra cost is at most ``probe_horizon`` times the hint's expected gain (the gain
would be collected on later steps of the shape) and at most ``max_probe_cost`` of the step
(or ``min_probe_ms``, for a light step).
Probes are marked ``Decision(probe=True)``.

Cold start: a tool with no declared solo time and no measurement is started on the GPU where
it may (queued or not, as VRAM allows), as a framework would; its guessed time never decides
for it. So is a GPU-capable tool whose profile declares only its CPU time (measured on a
machine without a GPU) until it has been tried on a GPU once. A side never measured is
then priced at its pessimistic guess (4x the measured side): it is probed only where that
bounded cost fits, so a first measurement never costs more than ``max_probe_cost`` of the
step under the guess.

Where ``view.observations`` is None the policy keeps a private `RuntimeMonitor` fed by its own
`observe`; when the node or runner owns a monitor (observations given), it only reads: if that
monitor was handed to the constructor it reads ``monitor.snapshot(batch)`` (hints about this
batch's shape), else ``view.observations``. It never records into a monitor it does not own.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40)},
...     vram_budget_mb=8000)
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=30, gpu_ms=42, transfer_ms=40))
>>> batch = Batch.of([("c1", "fft", spec)])
>>> policy = DefaultPolicy()
>>> d = policy.decide(batch, SchedulerView(bed.device_state()))
>>> dict(d.mapping), d.probe, d.reused
({'c1': 'cpu'}, False, False)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph_devsched.gpus import GpuCall, default_gpus
from langgraph_devsched.hedging import hedge_outcomes
from langgraph_devsched.hints import DevicePrior, ToolDeviceSpec
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.monitor.observations import Observations, PlacementOutcome
from langgraph_devsched.monitor.unknowns import ExplorationHint
from langgraph_devsched.options import GPU_OPTIONS, DeviceOption, is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import (
    Batch,
    CallRequest,
    Decision,
    SchedulerBase,
    SchedulerView,
)
from langgraph_devsched.schedulers.classic.dmda import DmdaScheduler
from langgraph_devsched.schedulers.classic.heft import HeftScheduler
from langgraph_devsched.schedulers.gpu_workers import allowed_gpus
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.policy.contention_fit import (
    SCREEN_MODELS,
    ContentionFit,
    fit_contention,
)
from langgraph_devsched.schedulers.policy.eviction import RecentModels
from langgraph_devsched.schedulers.policy.first_contact import (
    GUARD_ABOVE,
    RETRY_AFTER,
    FirstContact,
)
from langgraph_devsched.schedulers.policy.gpu_fit import PlacedRuns, fit_gpu_shares
from langgraph_devsched.schedulers.policy.gpu_placement import Placed, Placement, gpus_twin, place
from langgraph_devsched.schedulers.policy.hedge_rule import HedgeRule
from langgraph_devsched.schedulers.policy.investments import Investments, Preload, economics
from langgraph_devsched.schedulers.policy.model import (
    declared_error,
    estimate_params,
    oom_detect_ms,
    twin,
)
from langgraph_devsched.schedulers.policy.near_tie import NEAR_TIES_UNTIL, NearTies
from langgraph_devsched.schedulers.policy.priors import DevicePriors
from langgraph_devsched.schedulers.policy.reuse import (
    ChangeDetector,
    LastDecision,
    reusable,
    telemetry_bucket,
)
from langgraph_devsched.schedulers.policy.scores import (
    TwinScores,
    canon,
    observed_makespan,
)
from langgraph_devsched.schedulers.policy.search import (
    BOUND_LIMIT,
    EXACT_LIMIT,
    count_mappings,
    demand,
    search_mappings,
)
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed
from langgraph_devsched.words.option import ForecastOption, check_forecast, words_forecast

Mapping_ = tuple[DeviceOption, ...]
PROBE_KINDS = ("unknown", "symmetric", "sparse", "swap", "shared", "queued")
RESAMPLE_BELOW = 3
"""A ``sparse`` hint may re-run an executed placement until it has this many samples."""
MAX_DECISION_MS = 100.0
"""Default time budget of one decision's search (and contention fit), in ms."""
MAX_SHAPES = 1024
"""Default number of batch shapes whose fits and last decisions are kept."""
GPU_STARTS = 3
"""Several GPUs: the search's best mappings placed on them besides the chosen one."""
EVERY_RUN_UNTIL = 20
"""A shape's contention fit is refitted after each of its first runs, then when they double."""


class DefaultPolicy(SchedulerBase):
    """Contention-aware joint mapping search over monitor observations, with bounded probes,
    bounded search time, bounded state and reuse of unchanged decisions."""

    name = "monitor"

    def __init__(
        self,
        *,
        probe_horizon: float = 4.0,
        max_probe_cost: float = 0.5,
        min_probe_ms: float = 50.0,
        override_floor: float = 0.03,
        tie_tolerance: float = 0.005,
        exact_limit: int = EXACT_LIMIT,
        bound_limit: int = BOUND_LIMIT,
        max_decision_ms: float | None = MAX_DECISION_MS,
        clock: Callable[[], float] = time.perf_counter,
        max_shapes: int = MAX_SHAPES,
        reuse: bool = True,
        refresh_after: int = 50,
        monitor: RuntimeMonitor | None = None,
        hedge: bool = True,
        forecast: ForecastOption = None,
    ) -> None:
        self.probe_horizon = probe_horizon
        self.max_probe_cost = max_probe_cost
        self.min_probe_ms = min_probe_ms
        self.override_floor = override_floor
        self.tie_tolerance = tie_tolerance
        self.exact_limit = exact_limit
        self.bound_limit = bound_limit
        self.max_decision_ms = max_decision_ms
        self.clock = clock
        self.reuse = reuse
        self.refresh_after = refresh_after
        self._shared = monitor is not None
        self.monitor = monitor or RuntimeMonitor()
        self._private = False
        self._device: DeviceState | None = None
        self._fits: LruTable[tuple[str, ...], tuple[object, ContentionFit]] = LruTable(max_shapes)
        self._last: LruTable[tuple[str, ...], LastDecision] = LruTable(max_shapes)
        self._changes = ChangeDetector(max_keys=max(64, 4 * max_shapes))
        self._contact = FirstContact(max_shapes)
        self._near_ties = NearTies(max_shapes)
        self._recent = RecentModels()
        self._runs = PlacedRuns(max_shapes)
        self._gpu_trials: LruTable[tuple[str, ...], bool] = LruTable(max_shapes)
        self._gpu_fits: LruTable[tuple[str, ...], tuple[object, dict[str, float]]] = LruTable(
            max_shapes)
        self._heft = HeftScheduler()
        self._hedge = HedgeRule() if hedge else HedgeRule(max_per_step=0)
        self._dmda = DmdaScheduler()
        self._investments = Investments()
        self._priors = DevicePriors()
        self.forecast = check_forecast(forecast)
        """What forecasts from words (`forecast_words`): None, ``"lexical"``, ``"oracle"``
        (the bench hands the request's true tools over) or a forecaster."""
        self._scores: tuple[tuple[str, ...], TwinScores] | None = None
        """The scores the last full decision was made by, with its tools in call order."""

    def state_sizes(self) -> dict[str, int]:
        """How many entries each of the policy's own tables holds (all bounded)."""
        return {"fits": len(self._fits), "last_decisions": len(self._last),
                "change_keys": len(self._changes), "first_contacts": len(self._contact),
                "recent_models": len(self._recent), "hedged_sides": len(self._hedge),
                "near_ties": len(self._near_ties), "gpu_runs": len(self._runs),
                "gpu_trials": len(self._gpu_trials), "gpu_fits": len(self._gpu_fits),
                "model_economics": len(self._investments)}

    # -- protocol --------------------------------------------------------------------------

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        started = self.clock()
        batch = self._priors.apply(batch)  # words' device priors, for tools declaring none
        self._private = view.observations is None and not self._shared
        self._device = view.device
        tools = [c.tool for c in batch.calls]
        key = tuple(tools)
        specs = tuple(c.spec for c in batch.calls)
        self._recent.note((m for m in (c.spec.model_name(c.tool) for c in batch.calls) if m),
                          weights_mb=_weights_mb(batch, view.device))
        bucket = telemetry_bucket(view.device)  # the warm models included
        self._changes.watch(tools)  # their evidence counts from now on
        versions = self._changes.versions(tools)
        samples = self._changes.samples(tools)
        last = self._last.get(key)
        self._investments.note(Counter(m for c in batch.calls if (m := c.spec.model_name(c.tool))))
        if self.reuse and last is not None and not self._buying(batch, view.device) and reusable(
                last, specs, bucket, versions, refresh_after=self.refresh_after,
                samples=samples):
            last.reuses += 1
            return self._in_background(batch, self._again(batch, last), view.device)
        decision, settled = self._full(batch, view, started, last)
        if any(c.spec.idempotent for c in batch.calls):  # side-effect free: may hedge
            decision = self._hedge.attach(decision, batch, self._observations(batch, view),
                                          view.device, getattr(self.monitor, "censored", None))
        self._last[key] = LastDecision(specs, bucket, versions, decision.options_for(batch),
                                       decision, samples, settled)
        return self._in_background(batch, decision, view.device)

    def _in_background(self, batch: Batch, decision: Decision,
                       device: DeviceState | None) -> Decision:
        """``decision`` with the load worth starting beside it, if any
        (`investments.Investments.background`), on any GPU. A GPU the decision's GPU calls
        use is busy: a load there needs room beside their working memory (`_beside_mb`)."""
        if device is None or not device.devices or decision.hedges:
            return decision
        on_gpu = [c for c in batch.calls if is_gpu(decision.mapping[c.call_id])]
        busy, beside_mb = _beside_mb(batch, decision, device, on_gpu)
        renting = Counter(m for c in batch.calls if (m := c.spec.model_name(c.tool))
                          and not is_gpu(decision.mapping[c.call_id]))
        loads = self._investments.background(
            device, busy_gpus=busy, beside_mb=beside_mb, step_ms=max(
                decision.predicted_ms.values(), default=0.0), renting=renting,
            loading={m for c in on_gpu if (m := c.spec.model_name(c.tool))})
        if not loads:
            return decision
        said = ", ".join(f"{p.model} on GPU {p.gpu}" for p in loads)
        return dataclasses.replace(decision, background=tuple(loads),
                                   reason=f"{decision.reason}; loading {said} in the background")

    def _again(self, batch: Batch, last: LastDecision) -> Decision:
        """The remembered decision, for this batch's call ids (same tools, same order)."""
        old = last.decision
        ids = batch.call_ids
        predicted = dict(zip(ids, (old.predicted_ms.get(c, 0.0) for c in old.mapping),
                             strict=True))
        gpus = {new: old.gpus[was] for new, was in zip(ids, old.mapping, strict=True)
                if was in old.gpus}
        return Decision(
            mapping=dict(zip(ids, last.options, strict=True)),  # type: ignore[arg-type]
            reason=f"reused: nothing changed ({old.reason})", predicted_ms=predicted,
            scheduler=self.name, reused=True, gpus=gpus,
        )

    def _observations(self, batch: Batch, view: SchedulerView) -> Observations:
        if self._private or (self._shared and isinstance(self.monitor, RuntimeMonitor)):
            # read only: this batch's tools, hints about this batch's shape
            return self.monitor.snapshot(batch, tools={c.tool for c in batch.calls})
        obs = view.observations
        assert isinstance(obs, Observations), "view.observations: expected Observations"
        return obs

    def _full(
        self, batch: Batch, view: SchedulerView, started: float, last: LastDecision | None
    ) -> tuple[Decision, bool]:
        """A fresh decision, and whether its contention fit is settled."""
        obs = self._observations(batch, view)
        device = view.device
        tools = [c.tool for c in batch.calls]
        if not batch.calls:
            return self._decision({}, "empty batch"), True
        # nothing known of a side: searched from the GPU first, and no load priced on it
        blind = {c.call_id: _blind(c.tool, c.spec, obs) for c in batch.calls}
        unknown = {c.call_id: blind[c.call_id] or _gpu_untried(c.tool, c.spec, obs)
                   for c in batch.calls}
        # a device prior speaks only while nothing is known (the first call)
        choices = [self._choices(c.spec.allowed_options(), device, blind=unknown[c.call_id],
                                 prior=c.spec.device_prior if blind[c.call_id] else None)
                   for c in batch.calls]
        if any(c.spec.idempotent for c in batch.calls):  # a side a hedge is to measure
            censored = getattr(self.monitor, "censored", None)
            choices = [self._hedge.narrowed(c, ch, obs, device, censored)
                       for c, ch in zip(batch.calls, choices, strict=True)]
        specs = {c.tool: c.spec for c in batch.calls}
        outcomes = obs.outcomes_for(tuple(tools))
        budget = self.max_decision_ms

        def deadline(share: float) -> Callable[[], bool]:
            if budget is None:
                return lambda: False
            limit = started + share * budget / 1000.0
            return lambda: self.clock() >= limit

        # a batch enumerated exactly needs little of the budget: the fit may take most of it
        cheap = count_mappings(choices) <= self.exact_limit
        previous = self._fits.get(tuple(sorted(tools)))
        # several GPUs: each executed placement replayed on the GPUs it ran on (`gpu_fit`)
        fit = ContentionFit(shares=self._gpu_shares(tools, specs, obs, device, outcomes)) if len(
            device.devices) > 1 else self._fit(tools, specs, obs, device, outcomes,
                                               deadline(0.8 if cheap else 0.5))
        if previous is not None and previous[1].model != fit.model:
            # a new contention model is a new twin: the old one's first-contact misses do
            # not say how far this one is to be trusted
            self._contact.forget(tuple(sorted(tools)))
        params = {
            t: estimate_params(t, s, obs, bg_share=device.gpu_utilization,
                               share=fit.shares.get(t), threads=fit.threads.get(t, 1),
                               cpu_scale=fit.cpu_scale.get(t))
            for t, s in specs.items()
        }
        params = self._hedge.priced(params, specs, obs, getattr(self.monitor, "censored", None))
        self._investments.learn(economics(batch, params, lambda c: not unknown[c.call_id]))
        bought = self._buying(batch, device)
        if bought:  # loads the forecast repays: priced as investments, not as this step's cost
            params = {t: p.model_copy(update={"load_gpu_ms": 0.0})
                      if p.model_name(t) in bought else p for t, p in params.items()}
        bed = twin(params, device, oom_ms=oom_detect_ms(obs, params), model=fit.model)
        noise = _pooled_cv(obs)
        warm = None  # resident models: observations are warm, the twin charges loads
        if any(c.spec.model_name(c.tool) is not None for c in batch.calls) or device.resident:
            warm = twin(params, device, oom_ms=oom_detect_ms(obs, params), residency=False,
                        model=fit.model)
        used = {m: p.load_gpu_ms for t, p in params.items() if (m := p.model_name(t))}
        self._recent.learn(used)
        # only a resident model this batch does not use can be evicted (never a keep_warm one)
        evictable = [w.model for w in device.resident
                     if w.side == "gpu" and not w.keep_warm and w.model not in used]
        reload = self.reload_ms if self.reload_ms(evictable) > 0 else None
        model = TwinScores(bed, tools, outcomes, noise, self.override_floor, warm=warm,
                           reload=reload)
        self._scores = (tuple(tools), model)
        shape = tuple(sorted(tools))
        if self._contact.expects(shape):  # the measurements only when a prediction waits
            self._contact.settle(
                shape, {canon(o.placement): (observed_makespan(o), o.count) for o in outcomes
                        if o.count}, noise=model.noise)
        heuristics = [h.decide(batch, view) for h in (self._heft, self._dmda)]
        seeds = self._seeds(tools, outcomes, last, [d.options_for(batch) for d in heuristics])
        remaining = None if budget is None else max(
            0.0, budget - (self.clock() - started) * 1000.0)
        result = search_mappings(
            model, choices, seeds=seeds,
            lower_bounds=lambda codes: bed.lower_bounds(tools, codes),
            exact_limit=self.exact_limit, bound_limit=self.bound_limit,
            budget_ms=remaining, clock=self.clock,
            tie=self.tie_tolerance,
        )
        scores = result.scores
        low = min(scores.values())
        tie = max(self.tie_tolerance * low, 1e-6)

        def bucket(m: Mapping_) -> int:
            return int((scores[m] - low) // tie)

        best = min(scores, key=lambda m: (bucket(m), scores[m], demand(m)))
        best = _observed_tie_break(model, [m for m in scores if bucket(m) == 0], best)
        miss = self._contact.last_miss(shape)
        twin_best, best = best, _measured_guard(model, scores, best, miss)
        retry = best != twin_best and self._contact.retry(shape)
        if retry:  # the miss held long: the twin's best runs once, a first contact again
            best = twin_best
        several = len(device.devices) > 1
        price: Callable[[Mapping_], float] = model.values.__getitem__
        if several:  # probes and near-ties priced in the GPUs' twin, placed once each
            gbed = gpus_twin(params, device, oom_ms=oom_detect_ms(obs, params), model=fit.model)
            fixed = _Fixed(functools.partial(
                self._on_gpus, batch, gbed, device, scores=scores, heuristics=heuristics,
                choices=choices, fixed=True, spent=deadline(1.0)))
            price = fixed.price
        probe = self._probe(batch, obs, model, best, choices, price)
        # a near-tie trial is a probe: only in a shape's first runs, within the probe budget
        young = sum(o.count for o in outcomes) < NEAR_TIES_UNTIL and sum(
            o.probes for o in outcomes) < getattr(self.monitor, "probe_budget", 0)
        near = None if probe or best != twin_best or not young else self._near_ties.trial(
            shape, tools, _near_ties(scores, best, low + tie, price, self.tie_tolerance)
            if several else scores, best, low + tie, seen=model.seen)
        chosen = probe[0] if probe else near or best
        on_gpus: Placed | None = None
        trial: tuple[str, float] | None = None
        if several:  # where each call runs, in their twin (a probe's: placed when priced)
            on_gpus = fixed(chosen) if probe or near else self._on_gpus(
                batch, gbed, device, chosen, scores, heuristics, choices, fixed=False,
                spent=deadline(1.0))
            if not (probe or near) and young:
                on_gpus, trial = self._gpu_trial(shape, tools, batch, on_gpus)
            chosen = on_gpus.options()
        placed = canon(zip(tools, chosen, strict=True))
        if placed not in model.seen and _all_known(batch, obs, chosen):
            self._contact.expect(shape, placed, model.makespan(chosen) if on_gpus is None
                                 else on_gpus.span_ms)
        mapping = dict(zip(batch.call_ids, chosen, strict=True))
        run = list(zip(batch.call_ids, tools, chosen, strict=True))
        predicted = {c.call_id: c.end_ms for c in (
            bed.simulate(run) if on_gpus is None
            else gbed.simulate(run, gpus=on_gpus.gpus(batch.call_ids))).calls}
        how = {"exact": "over all", "bound": "bounded search,",
               "local": "local search,"}[result.method]
        if probe:
            reason = (f"probe: {probe[1].text}; predicted {price(chosen):.1f} ms vs "
                      f"best {price(best):.1f} ms")
        elif near:
            reason = (f"probe: a near-tie never ran, predicted {price(near):.1f} ms vs best "
                      f"{price(best):.1f} ms (the twin cannot rank them)")
        elif retry:
            reason = (f"probe: the twin's best, {scores[best]:.1f} ms {how} {len(scores)} "
                      f"mappings, never ran; the best executed mapping was kept over it "
                      f"for {RETRY_AFTER} decisions (the twin missed the last new mapping "
                      f"by {miss:.0%}): run once to measure that miss again")
        elif best != twin_best:
            reason = (f"best executed mapping, scored {scores[best]:.1f} ms: the twin's best "
                      f"{scores[twin_best]:.1f} ms {how} {len(scores)} mappings never ran, and "
                      f"it missed the last new mapping by {miss:.0%}")
        else:
            reason = (f"best predicted makespan {scores[best]:.1f} ms {how} "
                      f"{len(scores)} mappings")
        if bought:
            reason += (f" (loading {', '.join(sorted(bought))}: its forecast uses repay the "
                       "load)")
        if model.reloads.get(chosen):
            reason += (f" (with {model.reloads[chosen]:.0f} ms to reload the models it "
                       "evicts)")
        if trial is not None:
            reason = (f"probe: `{trial[0]}` never ran beside another call on one GPU (its "
                      f"share is a guess); predicted {on_gpus.span_ms if on_gpus else 0:.1f} "
                      f"ms vs best {trial[1]:.1f} ms")
        gpus: dict[str, int] = {}
        if on_gpus is not None:
            gpus = on_gpus.gpus(batch.call_ids)
            reason += (f"; on {len(device.devices)} GPUs {on_gpus.span_ms:.1f} ms, best of "
                       f"{on_gpus.evals} placements in their twin")
        decision = self._decision(mapping, reason, predicted_ms=predicted,
                                  probe=bool(probe or near or trial or retry), gpus=gpus)
        # settled: the fit is done (no screen half way), and past the runs after each of
        # which it is refitted, or the mapping is stable while the fit still learns: the
        # last decision's mapping chosen again, neither of the two a probe, no near-tie
        # left untried (the fit is refitted again once the evidence doubled)
        learning = bool(fit.shares or fit.threads) and sum(
            o.count for o in outcomes) < EVERY_RUN_UNTIL
        stable = (
            last is not None and last.options == chosen and not (probe or near or retry)
            and not last.decision.probe
            and not _untried_near_tie(model, scores, best, low + tie)
        )
        return decision, fit.complete and (stable or not learning)

    def _on_gpus(
        self, batch: Batch, bed: SimulatedTestbed, device: DeviceState, chosen: Mapping_,
        scores: Mapping[Mapping_, float], heuristics: Sequence[Decision],
        choices: Sequence[tuple[DeviceOption, ...]], *, fixed: bool, spent: Callable[[], bool],
    ) -> Placed:
        """Several GPUs: the chosen mapping placed on them (`gpu_placement`), starting also,
        unless the options are ``fixed`` (a probe), from the search's next best mappings,
        the heuristics' placements and all-queued."""
        devices = device.devices
        calls = batch.calls
        allowed = [[d.index for d in allowed_gpus(c.call_id, c.spec, devices)] for c in calls]
        spots = [[(o, g) for o in options for g in ((None,) if o == "cpu" else gs)]
                 for options, gs in zip(choices, allowed, strict=True)]

        def start(options: Mapping_, named: Mapping[str, int] | None = None) -> Placement:
            gpu_calls = []
            for c, o, ok in zip(calls, options, allowed, strict=True):
                g = (named or {}).get(c.call_id)
                if o != "cpu":
                    gpu_calls.append(GpuCall.of(c.call_id, c.tool, c.spec, g if g in ok else None))
            rule = default_gpus(gpu_calls, devices)
            return tuple((o, None if o == "cpu" else rule[c.call_id])
                         for c, o in zip(calls, options, strict=True))

        starts = [start(chosen)]
        if not fixed:
            ranked = sorted(scores, key=lambda m: (scores[m], demand(m)))
            starts += [start(m) for m in ranked[:GPU_STARTS] if m != chosen]
            queued = tuple("gpu_queued" if "gpu_queued" in c else c[0] for c in choices)
            starts.append(start(queued))
            for d in heuristics:
                options = d.options_for(batch)
                if all(o in c for o, c in zip(options, choices, strict=True)):
                    starts.append(start(options, d.gpus))
        tools = [c.tool for c in calls]
        return place(bed, batch.call_ids, tools, spots, starts, fixed_options=fixed,
                     spent=spent, observed=self._runs.observed(tools))

    def _gpu_trial(
        self, shape: tuple[str, ...], tools: list[str], batch: Batch, placed: Placed,
    ) -> tuple[Placed, tuple[str, float] | None]:
        """Several GPUs, a shape's first runs: once per shape, the twin's best placement
        that starts a tool whose share no run could tell (`PlacedRuns.shared`) at once
        beside another call on its GPU, when it costs at most ``max_probe_cost`` more than
        the best (the fit then learns that share from its runs); else ``placed``."""
        if shape in self._gpu_trials:
            return placed, None
        gpu_tools = {c.tool for c in batch.calls if any(is_gpu(o) for o in
                                                          c.spec.allowed_options())}
        told = self._runs.shared(tools) | _started_beside(tools, placed.placement)
        if gpu_tools <= told:
            return placed, None
        limit = placed.span_ms * (1.0 + self.max_probe_cost)
        for p, span in sorted(placed.tried.items(), key=lambda kv: (kv[1], kv[0])):
            if span > limit:
                break
            new = sorted((_started_beside(tools, p) & gpu_tools) - told)
            if new:
                self._gpu_trials[shape] = True
                return Placed(p, span, placed.evals, placed.tried), (new[0], placed.span_ms)
        return placed, None

    def _gpu_shares(
        self, tools: list[str], specs: dict[str, ToolDeviceSpec], obs: Observations,
        device: DeviceState, outcomes: Sequence[PlacementOutcome],
    ) -> dict[str, float]:
        """Several GPUs: the shares that replay the shape's placements on the GPUs they ran
        on (`gpu_fit`); refitted when that evidence moved."""
        replays = self._runs.replays(tools)
        shape = tuple(sorted(tools))
        seen = sum(o.count for o in outcomes)
        evidence = (tuple((tuple(r.calls), tuple(sorted(r.gpus.items())),
                           min(r.weight, RESAMPLE_BELOW)) for r in replays),
                    seen if seen < EVERY_RUN_UNTIL else int(math.log2(seen)))
        cached = self._gpu_fits.get(shape)
        if cached is not None and cached[0] == evidence:
            return cached[1]
        base = {t: estimate_params(t, s, obs, bg_share=device.gpu_utilization)
                for t, s in specs.items()}
        shares = fit_gpu_shares(base, device, replays, oom_ms=oom_detect_ms(obs, base),
                                start=cached[1] if cached is not None else None)
        self._gpu_fits[shape] = (evidence, shares)
        return shares

    def _seeds(
        self, tools: list[str], outcomes: Sequence[PlacementOutcome],
        last: LastDecision | None, heuristics: Sequence[Mapping_],
    ) -> list[Mapping_]:
        """Where a search starts: the last mapping, the executed placements, the classical
        heuristics' mappings, all-CPU and all-queued."""
        seeds: list[Mapping_] = []
        if last is not None:
            seeds.append(last.options)  # type: ignore[arg-type]
        for outcome in outcomes:
            m = _in_call_order(tools, outcome)
            if m is not None:
                seeds.append(m)
        seeds.extend(heuristics)
        seeds.append(tuple("cpu" for _ in tools))
        seeds.append(tuple("gpu_queued" for _ in tools))
        return seeds

    def _fit(
        self, tools: list[str], specs: dict[str, ToolDeviceSpec], obs: Observations,
        device: DeviceState, outcomes: Sequence[PlacementOutcome], deadline: Callable[[], bool],
    ) -> ContentionFit:
        """The contention fit for this shape, refitted (warm) when its evidence moved (a new
        placement executed, a placement's first samples, each of the shape's first
        `EVERY_RUN_UNTIL` runs, then twice the runs of the last fit: the means it fits are
        sharper) or the last fit ran out of time (then it resumes where it stopped). A warm
        refit is a few batched steepest-descent moves (``fit_contention(sweep=True)``); while
        the shape learns, a contention-model screen is spread over decisions
        (`SCREEN_MODELS` candidates each), so that no decision pays it all."""
        shape = tuple(sorted(tools))
        seen = sum(o.count for o in outcomes)
        evidence = (
            tuple(sorted((canon(o.placement), min(o.count, RESAMPLE_BELOW)) for o in outcomes)),
            seen if seen < EVERY_RUN_UNTIL else int(math.log2(seen)),
        )
        cached = self._fits.get(shape)
        if cached is not None and cached[0] == evidence and cached[1].complete:
            return cached[1]
        base = {t: estimate_params(t, s, obs, bg_share=device.gpu_utilization)
                for t, s in specs.items()}
        start = cached[1] if cached else None
        # an incomplete fit resumes where it stopped, also on new evidence: restarting its
        # passes from the first tool on every run, a fit longer than its deadline would never
        # complete (it paid the whole deadline each decision); one cut after its passes (in
        # the selection) is refitted warm
        resume = start is not None and not start.complete and cached is not None and (
            cached[0] == evidence or start.visits_left > 0)
        fit = fit_contention(
            tools, specs, obs, device, oom_ms=oom_detect_ms(obs, base),
            start=start, passes=1 if cached else 2, deadline=deadline,
            offset=start.resume_at if resume and start is not None else 0,
            visits=start.visits_left if resume and start is not None else None,
            sweep=start is not None and (start.complete or bool(start.screen_left) or not resume),
            screen=SCREEN_MODELS if seen < EVERY_RUN_UNTIL else None,
        )
        self._fits[shape] = (evidence, fit)
        return fit

    def reload_ms(self, evicted: Sequence[str]) -> float:
        """What evicting these resident models costs the steps after, as this policy prices
        it (`eviction.RecentModels`): their reload, for those a recent step used. A model
        whose GPU copy saves its calls nothing (`Investments.economics`: none is faster
        there than on the CPU) while a copy of it is in host memory costs nothing to evict:
        its calls run on the CPU from that copy. Charged its reload, such a copy (an OCR
        model whose calls are transfer-bound, 47 ms on the CPU, 157 ms on the GPU) kept a
        2.7 s CPU call off the GPU it fitted once evicted (gen-s3-166 with the testbed's
        room rule for model-less calls, 2.38x)."""
        device = self._device
        host = ({w.model for w in device.resident if w.side == "cpu"}
                if device is not None else set())
        return self._recent.reload_ms([m for m in evicted if not (
            m in host and (eco := self._investments.economics(m)) is not None
            and eco.saving_ms <= 0)])

    def _buying(self, batch: Batch, device: DeviceState) -> set[str]:
        """The batch's models cold on every GPU whose load the rent-or-buy rule buys now."""
        cold = {m for c in batch.calls if (m := c.spec.model_name(c.tool))
                and not any(g.warm(m) for g in device.devices)}
        return self._investments.to_buy(cold) if cold else set()

    def declare_tools(self, specs: Mapping[str, ToolDeviceSpec]) -> None:
        """The app's tools and their hints, known before any step (the node's, or a
        benchmark's): models declared with profiles and load times may be warmed while the
        machine is idle before their first use (`preloads`)."""
        self._investments.declare(specs)

    def scored(self, batch: Batch, mapping: Mapping[str, DeviceOption]) -> float | None:
        """This policy's score of ``mapping`` for ``batch`` (`scores.TwinScores`: the
        twin's prediction, or a measurement where it shows the twin visibly wrong, plus the
        reload of its evictions), by the scores its last full decision was made with; None
        when that decision was of other tools (or another call order), or on several GPUs
        (there the one-GPU scores do not rank the mappings). What a mapping other than its
        own is predicted to cost, by the reckoning that chose its own."""
        kept = self._scores
        tools = tuple(c.tool for c in batch.calls)
        if kept is None or kept[0] != tools or (
                self._device is not None and len(self._device.devices) > 1):
            return None
        try:
            options = tuple(mapping[c] for c in batch.call_ids)
        except KeyError:
            return None
        return kept[1].peek(options)

    def coming_uses(self, model: str) -> float:
        """The uses of ``model`` its forecast expects over the coming steps (what a load of
        it is repaid by: `monitor.forecast.UseForecast.coming`; 0: never used)."""
        return self._investments.forecast.coming(model)

    @property
    def reads_words(self) -> bool:
        """Whether `forecast_words` answers (a forecaster other than the oracle's)."""
        return self.forecast is not None and self.forecast != "oracle"

    def forecast_words(self, text: str, tools: Sequence[tuple[str, str]]) -> Any:
        """A forecast from words of which of ``tools`` (name, description) the work that
        ``text`` asks for calls (`langgraph_devsched.words`); None without a forecaster.
        It changes nothing here: `expect` hands it over once it is in force."""
        return words_forecast(self.forecast, text, tools)

    def expect(self, forecast: Any) -> None:
        """A forecast from words now in force (`forecast_words`): it enters the loads'
        economics (`investments.Investments.expect`). One that failed (``error``) or whose
        ``probabilities`` are not a mapping is ignored."""
        probs = getattr(forecast, "probabilities", None)
        if getattr(forecast, "error", None) is None and isinstance(probs, Mapping):
            self._investments.expect(probs)
            classes = getattr(forecast, "classes", None)
            if isinstance(classes, Mapping):  # device priors for tools declaring none
                self._priors.learn(classes)

    def preloads(self, device: DeviceState, idle_ms: float) -> list[Preload]:
        """The model loads worth running in ``idle_ms`` before the next step
        (`investments.Investments.preloads`): ``device`` is the state now."""
        return self._investments.preloads(device, idle_ms)

    def calibration(self) -> tuple[Batch, Decision] | None:
        """An idle-time run to measure an unmeasured side of a recent side-effect-free call
        (`hedge.HedgeRule.calibration`), or None; only with a monitor this policy reads."""
        if self._device is None or not (self._private or self._shared) or not (
                self._hedge.recent):
            return None
        return self._hedge.calibration(self.monitor.snapshot(), self._device,
                                       getattr(self.monitor, "censored", None))

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        self._changes.observe(record)
        self._investments.paid((c.model, c.on_gpu) for c in record.calls if c.model)
        on_gpu = Counter(c.device for c in record.calls if c.on_gpu)
        self._investments.crowd(c.model for c in record.calls
                                if c.model and c.on_gpu and on_gpu[c.device] > 1)
        # a GPU load seen is what evicting that model costs later steps, whichever batch
        # comes next (a decision learns only its own batch's models' load times)
        if len(self._recent):  # it learns only of models a decision used
            self._recent.learn({c.model: c.load_ms for c in record.calls
                                if c.loaded and c.model and c.on_gpu and c.load_ms > 0},
                               weights_mb=_weights_mb(batch, self._device))
        measured = tuple(h.loser for h in hedge_outcomes(record) if h.complete)
        if measured:  # a hedge (or an idle run) measured a side: its tools' decisions move
            self._changes.observe(StepRecord(measured, 0.0))
        if self._private and self._device is not None:
            self.monitor.record_step(batch, decision, record, self._device)
        if self._device is not None and len(self._device.devices) > 1:
            self._runs.add(record)

    # -- search ----------------------------------------------------------------------------

    @staticmethod
    def _choices(
        allowed: Sequence[DeviceOption], device: DeviceState, *, blind: bool = False,
        prior: DevicePrior | None = None,
    ) -> tuple[DeviceOption, ...]:
        """The options searched; a ``blind`` tool (nothing declared, never measured) starts
        on the GPU where it may, as a framework would: a guess is not a cost to weigh. Its
        ``device_prior`` may say otherwise: ``cpu`` starts it on the CPU, ``neutral`` leaves
        its first call to the search (its GPU side is then still tried once)."""
        if not device.gpu_available and "cpu" in allowed:
            return ("cpu",)
        if blind and prior == "cpu" and "cpu" in allowed:
            return ("cpu",)
        if blind and prior != "neutral" and any(is_gpu(o) for o in allowed):
            return tuple(o for o in allowed if is_gpu(o))
        return tuple(allowed)

    # -- probes ----------------------------------------------------------------------------

    def _probe(
        self, batch: Batch, obs: Observations, model: TwinScores, best: Mapping_,
        choices: list[tuple[DeviceOption, ...]], price: Callable[[Mapping_], float],
    ) -> tuple[Mapping_, ExplorationHint] | None:
        """The most valuable affordable probe; hints are weighed best expected gain first
        while their probe mappings fit `PROBE_CALLS` (at least one). A probe's cost is its
        ``price`` less the best's (one GPU: the twin's scores; several: `_gpu_prices`), and
        on several GPUs at least what the one-GPU scores say: a probe must be affordable in
        both (the hints' gains are still one-GPU figures)."""
        tools = [c.tool for c in batch.calls]
        counts = {canon(o.placement): o.count for o in obs.outcomes_for(tuple(tools))}
        one_base = model.values[best]
        base: float | None = None  # the best's price, once a probe is weighed
        floor = 0.01 * one_base
        candidates = []
        hints = [h for h in obs.hints if h.probes_left > 0 and h.kind in PROBE_KINDS
                 and _gain(batch, obs, h) > floor and not self._answered(h)]
        # the best-scored mappings, for hints met anywhere
        ranked = sorted(model.values, key=lambda m: (model.values[m], m))[:_SCAN]
        # the hints in order of gain, while their probe mappings fit `PROBE_CALLS` simulated
        # calls (at least one hint), all scored in one batch: the simulator's cost is
        # mostly per batch
        sets: list[tuple[list[Mapping_], list[Mapping_]]] = []
        total = 0
        for hint in hints:
            plain, room = self._probe_sets(hint, best, tools, choices)
            total += (len(plain) + len(room)) * len(tools)
            if sets and total > PROBE_CALLS:
                break
            sets.append((plain, room))
        model.score([m for plain, room in sets for m in (*plain, *room)])
        for hint, probe_sets in zip(hints, sets, strict=False):
            for m in self._realise(hint, tools, model, ranked, probe_sets):
                runs = counts.get(canon(zip(tools, m, strict=True)), 0)
                if m == best or runs >= (RESAMPLE_BELOW if hint.kind == "sparse" else 1):
                    continue
                # a side never measured nor declared is priced at its pessimistic guess
                # (`model.UNKNOWN_FACTOR` times the measured side): the probe's
                # cost stays bounded by the step's, whatever the unknown side turns out
                # several GPUs: affordable in their twin and in the one-GPU scores (on
                # one GPU the two are the same figure)
                base = price(best) if base is None else base
                costs = ((price(m) - base, base), (model.values[m] - one_base, one_base))
                cost = max(c for c, _ in costs)
                # a probe of a light step may cost up to `min_probe_ms` (once): otherwise a
                # 10 ms tool's unknown side, guessed at 4x, would never be measured
                affordable = all(c <= max(self.max_probe_cost * b, self.min_probe_ms)
                                 for c, b in costs)
                gain = _gain(batch, obs, hint)
                if affordable and cost <= self.probe_horizon * gain:
                    value = gain - cost / self.probe_horizon
                    candidates.append((-value, demand(m), m, hint))
                    break
        if not candidates:
            return None
        _, _, m, hint = min(candidates, key=lambda c: (c[0], c[1]))
        return m, hint

    def _answered(self, hint: ExplorationHint) -> bool:
        """A hint toward a side a hedge or an idle run cut at its bound (`HedgeRule`)."""
        censored = getattr(self.monitor, "censored", None)
        if hint.kind == "swap":  # the first tool goes to the CPU, the second to the GPU
            a, b = hint.tools
            return self._hedge.answered(a, "cpu", censored) or (
                self._hedge.answered(b, "gpu", censored))
        return hint.kind in ("unknown", "symmetric") and bool(hint.devices) and (
            self._hedge.answered(hint.tools[0], hint.devices[0], censored))

    @staticmethod
    def _realise(
        hint: ExplorationHint, tools: list[str], model: TwinScores, ranked: list[Mapping_],
        sets: tuple[list[Mapping_], list[Mapping_]],
    ) -> list[Mapping_]:
        """Mappings that measure what ``hint`` says is unknown: the best predicted ones
        among those scored, then the hint's change to ``best`` alone, then with one other
        call's option changed (to make room; ``sets``: `_probe_sets`), each group best
        predicted first."""
        plain_set, room_set = sets
        model.score([*plain_set, *room_set])
        values = model.values
        plain = sorted(plain_set, key=lambda m: (values[m], m))
        room = sorted(room_set, key=lambda m: (values[m], m))
        # the first three that measure it (not every ranked mapping tested)
        anywhere = list(itertools.islice((m for m in ranked if _measures(hint, m, tools)), 3))
        return anywhere + plain + room

    @staticmethod
    def _probe_sets(
        hint: ExplorationHint, best: Mapping_, tools: list[str],
        choices: list[tuple[DeviceOption, ...]],
    ) -> tuple[list[Mapping_], list[Mapping_]]:
        """The hint's change to ``best`` alone, and with one other call's option changed
        (at most `_ROOM` of those)."""

        def moved(m: list[DeviceOption], i: int, device: str) -> list[list[DeviceOption]]:
            if device == "cpu":
                return [[*m[:i], "cpu", *m[i + 1:]]] if "cpu" in choices[i] else []
            return [[*m[:i], o, *m[i + 1:]] for o in GPU_OPTIONS if o in choices[i]]

        out: list[list[DeviceOption]] = []
        touched: set[int] = set()
        if hint.kind in ("shared", "queued"):
            (tool,) = hint.tools
            was, now = ("gpu_queued", "gpu_now") if hint.kind == "shared" else (
                "gpu_now", "gpu_queued")
            for i, t in enumerate(tools):
                if t == tool and best[i] == was and now in choices[i]:
                    out, touched = [[*best[:i], now, *best[i + 1:]]], {i}
                    break
        elif hint.kind == "swap":
            a, b = hint.tools
            ia = next((i for i, t in enumerate(tools) if t == a and is_gpu(best[i])), None)
            ib = next((i for i, t in enumerate(tools) if t == b and best[i] == "cpu"), None)
            if ia is None or ib is None or hint.option not in choices[ib]:
                return [], []
            if "cpu" not in choices[ia]:
                return [], []
            m = list(best)
            m[ia], m[ib] = "cpu", hint.option
            out, touched = [m], {ia, ib}
        else:
            (tool,), (device,) = hint.tools, hint.devices
            for i, t in enumerate(tools):
                if t == tool and is_gpu(best[i]) != (device == "gpu"):
                    out, touched = moved(list(best), i, device), {i}
                    break
        plain_set = list(dict.fromkeys(tuple(m) for m in out))
        variants: set[Mapping_] = set()
        for m in out:
            for j, options in enumerate(choices):
                if j not in touched:
                    variants.update(
                        tuple([*m[:j], o, *m[j + 1:]]) for o in options if o != m[j]
                    )
        return plain_set, sorted(variants)[:_ROOM]


_SCAN = 2000
"""How many of the best-scored mappings are scanned for one that measures a hint."""
_ROOM = 128
"""At most this many make-room variants are scored for one hint."""
PROBE_CALLS = 4096
"""A decision weighs the hints (best expected gain first) whose probe mappings, times the
batch's calls, add up to at most this many (at least one hint)."""


def _started_beside(tools: Sequence[str], placement: Placement) -> set[str]:
    """The tools a placement starts at once (``gpu_now``) beside another such call on the
    same GPU."""
    now = [(t, g) for t, (o, g) in zip(tools, placement, strict=True) if o == "gpu_now"]
    return {t for i, (t, g) in enumerate(now)
            if any(h == g for j, (_, h) in enumerate(now) if j != i)}


def _all_known(batch: Batch, obs: Observations, mapping: Mapping_) -> bool:
    """Whether every call of ``mapping`` runs on a side of its tool that is declared or
    measured: only then does a miss of the twin say its contention model is wrong (a side
    never measured is a guess, and missing it is what a probe is for)."""
    for call, option in zip(batch.calls, mapping, strict=True):
        side = "gpu" if is_gpu(option) else "cpu"
        profile = call.spec.profile
        if profile is not None and getattr(profile, f"{side}_ms") is not None:
            continue
        if not any(e.device == side and not e.fallbacks for e in obs.for_tool(call.tool)):
            return False
    return True


def _measured_guard(
    model: TwinScores, scores: Mapping[Mapping_, float], best: Mapping_, miss: float
) -> Mapping_:
    """``best``, unless the twin's last first-contact ``miss`` (`first_contact.FirstContact`)
    exceeds `GUARD_ABOVE`, ``best`` never ran, and its prediction widened by that miss does
    not beat the best-scored executed mapping: then that one (its score is the twin's
    prediction, or its measured makespan where that overrides it; ranking the executed
    mappings by their raw measurements lost more with resident models, whose loads the twin
    charges apart). A twin whose contention fit went wrong (seen under the idle-queue
    physics: a late model switch predicting every new mapping at about half its makespan)
    would otherwise wander from one untried mapping to the next."""
    if miss <= GUARD_ABOVE:
        return best
    tools = model.tools
    if canon(zip(tools, best, strict=True)) in model.seen:
        return best
    executed = (_in_call_order(tools, o) for o in model.seen.values())
    measured = [m for m in executed if m is not None and m in scores]
    if not measured:
        return best
    known = min(measured, key=lambda m: (scores[m], demand(m)))
    return best if scores[best] * (1.0 + miss) < scores[known] else known


TIE_BREAK_Z = 2.0
"""An observed near-tie is broken against the twin only when the measured makespans differ
by more than this many standard errors of their difference."""


def _observed_tie_break(
    model: TwinScores, tied: Sequence[Mapping_], best: Mapping_
) -> Mapping_:
    """Among near-ties (within the tie tolerance of the best score), the twin's best unless
    an executed one measured lower by more than `TIE_BREAK_Z` standard errors of the
    difference (the mappings' own runs, the measurement noise): a mean of a few noisy runs
    lower by less is noise, and following it chose a mapping 1.6% off the optimum under 5%
    noise where the twin ranked the two right."""
    tools = model.tools

    def runs(m: Mapping_) -> int:
        seen = model.seen.get(canon(zip(tools, m, strict=True)))
        return seen.count if seen is not None else 0

    for m in sorted(tied, key=lambda m: (model.observed.get(m, math.inf), demand(m))):
        if m == best or m not in model.observed:
            continue
        mine = model.observed.get(best)
        if mine is None:
            break  # the twin's best never ran twice: it is tried, not outvoted
        spread = model.noise * math.sqrt(mine**2 / max(1, runs(best)) +
                                         model.observed[m] ** 2 / max(1, runs(m)))
        if model.observed[m] < mine - TIE_BREAK_Z * spread:
            return m
        break  # the lowest measured one is not clearly lower: none is
    return best


def _untried_near_tie(
    model: TwinScores, scores: Mapping[Mapping_, float], best: Mapping_, below: float
) -> bool:
    """Whether a mapping the twin scores within the tie of ``best`` (under ``below``), and
    that is not just ``best`` with equal calls swapped, never ran: the twin cannot tell the
    two apart, so the shape is not settled until a later decision has tried it."""
    mine = canon(zip(model.tools, best, strict=True))
    for m, score in scores.items():
        if score < below:
            placement = canon(zip(model.tools, m, strict=True))
            if placement != mine and placement not in model.seen:
                return True
    return False


def _in_call_order(tools: list[str], outcome: PlacementOutcome) -> Mapping_ | None:
    """An executed placement as a mapping of ``tools`` (each tool's options in call order)."""
    queues: dict[str, list[DeviceOption]] = {}
    for tool, option in outcome.placement:
        queues.setdefault(tool, []).append(option)
    out = []
    for tool in tools:
        if not queues.get(tool):
            return None
        out.append(queues[tool].pop(0))
    return tuple(out)


def _measures(hint: ExplorationHint, m: Mapping_, tools: list[str]) -> bool:
    """Whether executing ``m`` measures what ``hint`` says is unknown."""
    if hint.kind == "swap":
        a, b = hint.tools
        return any(t == a and o == "cpu" for t, o in zip(tools, m, strict=True)) and any(
            t == b and o == hint.option for t, o in zip(tools, m, strict=True))
    (tool,) = hint.tools[:1]
    if hint.kind == "shared":
        return any(t == tool and o == "gpu_now" for t, o in zip(tools, m, strict=True)) and (
            sum(1 for o in m if is_gpu(o)) > 1)
    if hint.kind == "queued":
        return any(t == tool and o == "gpu_queued" for t, o in zip(tools, m, strict=True))
    on_gpu = hint.devices[:1] == ("gpu",)
    return any(t == tool and is_gpu(o) == on_gpu for t, o in zip(tools, m, strict=True))


def _gain(batch: Batch, obs: Observations, hint: ExplorationHint) -> float:
    """The hint's expected gain; for a side known only from a declared profile that proved
    wrong where it was measured (`declared_error`), the declared time is read as that much
    too slow (the optimistic end of what the profile's error allows)."""
    gain = hint.expected_gain_ms
    if hint.kind != "unknown" or not hint.devices:
        return gain
    for call in batch.calls:
        if call.tool == hint.tools[0] and call.spec.profile is not None:
            side = call.spec.profile.gpu_ms if hint.devices[0] == "gpu" else (
                call.spec.profile.cpu_ms)
            if side is None:
                return gain
            error = min(0.9, declared_error(call.tool, call.spec, obs))
            return gain + error * side
    return gain


class _Fixed:
    """Several GPUs: each mapping placed on the GPUs in their twin, its options fixed
    (``place``: `DefaultPolicy._on_gpus`), once per decision. Its makespan is the mapping's
    price for probes and near-ties: the one-GPU scores put every GPU call on one GPU, where
    a model that fits warm only on another is priced cold or on the CPU (a 240 s CPU run
    of a diffusion model warm on the 80 GB GPU scored a near-tie with the best, 1.2 s on
    4 GPUs). A probe chosen runs the placement it was priced by."""

    def __init__(self, place: Callable[[Mapping_], Placed]) -> None:
        self._place = place
        self._kept: dict[Mapping_, Placed] = {}

    def __call__(self, mapping: Mapping_) -> Placed:
        found = self._kept.get(mapping)
        if found is None:
            found = self._kept[mapping] = self._place(mapping)
        return found

    def price(self, mapping: Mapping_) -> float:
        return self(mapping).span_ms


def _near_ties(scores: Mapping[Mapping_, float], best: Mapping_, below: float,
               price: Callable[[Mapping_], float], tolerance: float) -> dict[Mapping_, float]:
    """Several GPUs: the one-GPU near-ties (scored under ``below``) that are near-ties on
    the GPUs too, their price within ``tolerance`` of the best's."""
    limit = price(best) * (1.0 + tolerance) + 1e-6
    return {m: score for m, score in scores.items()
            if score < below and (m == best or price(m) <= limit)}


def _blind(tool: str, spec: ToolDeviceSpec, obs: Observations) -> bool:
    """Whether nothing is known of ``tool``: no declared solo time, no measurement."""
    return not spec.declares_time and not obs.for_tool(tool)


def _gpu_untried(tool: str, spec: ToolDeviceSpec, obs: Observations) -> bool:
    """Whether ``tool`` may run on a GPU but its GPU side is neither declared (no
    ``profile.gpu_ms``: a profile taken on the CPU only) nor was ever tried (no call of it
    placed on a GPU option, fallbacks included). Its GPU time is then only the pessimistic
    guess, which a probe's bound would never let be measured for a heavy tool: such a tool
    starts on the GPU, as a framework would, and is compared once both sides are known
    (unless its ``device_prior`` says ``cpu``: then a probe measures it, if one is worth
    it)."""
    profile = spec.profile
    if not spec.gpu_capable or (profile is not None and profile.gpu_ms is not None):
        return False
    if spec.device_prior == "cpu":  # a CPU tool by its prior: no forced try
        return False
    return not any(is_gpu(e.option) for e in obs.for_tool(tool))


def _pooled_cv(obs: Observations) -> float:
    """Typical relative spread of the per-call estimates (0 when nothing is repeated)."""
    cvs = [e.std_ms / e.run_ms for e in obs.estimates if e.count >= 2 and e.run_ms > 0]
    return sum(cvs) / len(cvs) if cvs else 0.0


def _beside_mb(batch: Batch, decision: Decision, device: DeviceState,
               on_gpu: Sequence[CallRequest]) -> tuple[set[int], dict[int, float]]:
    """The GPUs ``decision``'s GPU calls (``on_gpu``) use, and per GPU the working memory a
    load beside the step must leave room for: one GPU, every call's, whatever its mapping;
    several, that of the calls placed on it (the decision's GPU, else the default rule,
    `gpus.default_gpus`, as the node and the bench place them). A GPU a call of unknown
    working memory would use is left out (no load beside it)."""
    if len(device.devices) == 1:
        vram = [c.spec.vram_mb for c in batch.calls]
        busy = {device.devices[0].index} if on_gpu else set()
        if None in vram:
            return busy, {}
        return busy, {device.devices[0].index: sum(v for v in vram if v is not None)}
    indices = {d.index for d in device.devices}
    named = [g if (g := decision.gpus.get(c.call_id)) in indices else None for c in on_gpu]
    where = default_gpus([GpuCall.of(c.call_id, c.tool, c.spec, g)
                          for c, g in zip(on_gpu, named, strict=True)], device.devices)
    mb: dict[int, float | None] = {}
    for c in on_gpu:
        gpu, working = where[c.call_id], c.spec.vram_mb
        held = mb.get(gpu, 0.0)
        mb[gpu] = None if held is None or working is None else held + working
    return set(mb), {g: v for g, v in mb.items() if v is not None}


def _weights_mb(batch: Batch, device: DeviceState | None) -> dict[str, float]:
    """The size of each model's weights that the batch's hints or the GPU residency say."""
    sizes = {w.model: w.weights_mb for w in (device.resident if device else ()) if w.side == "gpu"}
    for c in batch.calls:
        model = c.spec.model_name(c.tool)
        if model is not None and c.spec.weights_mb:
            sizes[model] = float(c.spec.weights_mb)
    return sizes


def __getattr__(name: str) -> Any:
    """``MonitorPolicy``, the class's old name, for one release (it warns once a use)."""
    if name == "MonitorPolicy":
        warnings.warn("MonitorPolicy is now DefaultPolicy (\"monitor\" names the runtime "
                      "monitor; the scheduler's registry name stays 'monitor')",
                      DeprecationWarning, stacklevel=2)
        return DefaultPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
