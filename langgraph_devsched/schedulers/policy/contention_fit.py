"""The contention fit: GPU shares and CPU threads per tool, and the contention physics,
fitted so that the twin (`model.twin`) replays the executed placements of a batch shape.

The hints declare solo times; what calls cost each other when they share a device is only
seen in executed placements. `fit_contention` replays them on the twin and moves each tool's
share and threads over a grid (`SHARE_GRID`, `THREAD_GRID`) to the values whose predicted
run times and latencies are nearest what was measured, then asks which contention physics
(`CANDIDATE_MODELS`) explains them best. Its steps, in `_Fit`:

1. the evidence: the shape's most-run executed placements (`_ordered_calls`) and which
   tools shared the GPU or the cores there (only those have something to fit);
2. ``descend``: coordinate descent, tool by tool (or, warm, a few steepest-descent moves,
   `_sweep`), a declared CPU time no solo run measured corrected on the way (``rescale``);
3. ``select``: the current physics and a few candidates screened on the same evidence, in
   one batched simulation; another physics replaces the current one only when clearly
   better (`SELECT_BELOW`).

Every step only lowers the loss, so a fit cut by its deadline is consistent, and resumes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.batchsim import Physics
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations, PlacementOutcome
from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.schedulers.policy.model import (
    AGREE_WITHIN,
    MAX_CPU_SCALE,
    PRIOR_WEIGHT,
    ContentionModel,
    estimate_params,
    noise_cv,
    solo_ms,
    twin,
)
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

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
    error; not the makespans, which under noise are maxima and biased upwards).

    Coordinate descent over `SHARE_GRID` and `THREAD_GRID`; a parameter that no executed
    placement exercises (the tool never shared its device) keeps its start value. A tool's
    whole grid is scored in one batch (every executed placement under every grid value, by
    the batched simulator). When ``deadline()`` turns true the fit stops between two tools
    (``complete=False``; each step only lowers the loss, so what it has is consistent);
    ``offset`` rotates the tool order and ``visits`` (default: ``passes`` times the tools)
    bounds the tool updates, so that a fit resumed later with its ``resume_at`` and
    ``visits_left`` finishes the work.

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
    gpu_shared, cpu_shared = _shared(plans, device)
    if not plans or not (gpu_shared or cpu_shared):  # nothing shared: nothing to fit
        return ContentionFit(shares, threads, model=start.model if start else ContentionModel(),
                             selected_at=start.selected_at if start else 0,
                             cpu_scale=cpu_scale)
    fit = _Fit(tools, specs, obs, device, oom_ms, start, deadline, plans, shares, threads,
               cpu_scale, gpu_shared, cpu_shared)
    if sweep and start is not None:
        fit.warm_sweep()
        total = 0
    else:
        total = passes * len(fit.distinct) if visits is None else visits
    stopped = fit.descend(offset, total)
    if stopped is not None:
        return stopped
    return fit.select(start, runs, screen)


def _shared(plans: Sequence[tuple[PlacementOutcome, list[tuple[str, str, DeviceOption, int]]]],
            device: DeviceState) -> tuple[set[str], set[str]]:
    """The tools that shared the GPU (with each other or the background) and those that
    shared the cores in some executed placement: only their contention shows."""
    gpu_shared: set[str] = set()
    cpu_shared: set[str] = set()
    for _, calls in plans:
        on_gpu = [t for _, t, o, _ in calls if is_gpu(o)]
        on_cpu = [t for _, t, o, _ in calls if o == "cpu"]
        if len(on_gpu) > 1 or (on_gpu and device.gpu_utilization > 0):
            gpu_shared.update(on_gpu)
        if len(on_cpu) > 1:
            cpu_shared.update(on_cpu)
    return gpu_shared, cpu_shared


_FIELDS = ("cpu_ms", "gpu_ms", "gpu_share", "cpu_threads")


class _Fit:
    """One run of `fit_contention`: the evidence it replays (the executed placements as
    option codes, their measured run times and latencies, their weights), the tables it
    moves (``shares``, ``threads``, ``cpu_scale``: the caller's dicts, changed in place), the
    twin's parameters they give (``params``) and the current contention model."""

    def __init__(
        self, tools: Sequence[str], specs: Mapping[str, ToolDeviceSpec], obs: Observations,
        device: DeviceState, oom_ms: float, start: ContentionFit | None,
        deadline: Callable[[], bool] | None,
        plans: Sequence[tuple[PlacementOutcome, list[tuple[str, str, DeviceOption, int]]]],
        shares: dict[str, float], threads: dict[str, int], cpu_scale: dict[str, float],
        gpu_shared: set[str], cpu_shared: set[str],
    ) -> None:
        self.tools, self.specs, self.obs, self.device = tools, specs, obs, device
        self.oom_ms, self.deadline, self.plans = oom_ms, deadline, plans
        self.shares, self.threads, self.cpu_scale = shares, threads, cpu_scale
        self.gpu_shared, self.cpu_shared = gpu_shared, cpu_shared
        self.distinct = sorted(set(tools))
        self.params = {t: self.estimate(t) for t in self.distinct}

        from langgraph_devsched.batchsim import mapping_codes, require_numpy

        np = self.np = require_numpy()
        self.n = n = len(tools)
        self.plan_codes = mapping_codes([[o for _, _, o, _ in calls] for _, calls in plans], n)
        self.seen_run = np.array([[o.run_ms[k] for _, _, _, k in calls] for o, calls in plans])
        self.seen_lat = np.array([[o.latency_ms[k] if len(o.latency_ms) > k else 0.0
                                   for _, _, _, k in calls] for o, calls in plans])
        # a placement run many times counts more, up to 5 runs (older ones may be stale)
        self.weight = np.array([min(o.count, 5) for o, _ in plans], dtype=np.float64)
        self.model = start.model if start else ContentionModel()
        self.selected_at = start.selected_at if start else 0
        self.table_rows: dict[Any, dict[str, Any]] = {}
        # a declared CPU time that no solo run measured (the tool always shared the CPU):
        # corrected from its runs beside other calls, through the twin's own core sharing
        # (what it predicts for those very steps). Not the GPU side: there a wrong time and
        # a wrong contention physics look alike (scaling GPU times too lost
        # `parallel_llm_colocated` under idle_queue, 1.06x, with exact profiles)
        self.unsolo = {t for t in cpu_shared if (p := specs[t].profile) is not None
                       and p.cpu_ms is not None and solo_ms(obs.for_tool(t), "cpu") is None}
        self.on_cpu = self.plan_codes == 2
        self.cv = noise_cv(obs)
        self.thread_grid = [n for n in THREAD_GRID if n <= max(1, device.cpu_cores)]

    # -- the twin and the loss ----------------------------------------------------------------

    def estimate(self, t: str) -> ToolParams:
        return self.estimate_with(t, self.shares.get(t))

    def estimate_with(self, t: str, share: float | None) -> ToolParams:
        """Tool ``t``'s twin parameters with GPU share ``share`` (the fitted threads and CPU
        scale)."""
        return estimate_params(t, self.specs[t], self.obs, bg_share=self.device.gpu_utilization,
                               share=share, threads=self.threads.get(t, 1),
                               cpu_scale=self.cpu_scale.get(t))

    def bed(self, model: ContentionModel | None = None) -> SimulatedTestbed:
        """The twin with the current parameters under ``model`` (default: the current)."""
        return twin(self.params, self.device, oom_ms=self.oom_ms, residency=False,
                    model=self.model if model is None else model)

    def late(self) -> bool:
        return self.deadline is not None and self.deadline()

    def scored(self, starts: Any, ends: Any, g: int) -> list[float]:
        """The loss of each of ``g`` groups of simulated plans: relative squared errors of
        the run times and latencies, per plan weighted."""
        np, pn, n = self.np, len(self.plans), self.n
        run = (ends - starts).reshape(g, pn, n)
        lat = ends.reshape(g, pn, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            err_run = np.where(self.seen_run > 0, (run / self.seen_run - 1.0) ** 2, 0.0)
            err_lat = np.where(self.seen_lat > 0, (lat / self.seen_lat - 1.0) ** 2, 0.0)
        total = ((err_run + err_lat).sum(axis=2) * self.weight).sum(axis=1)
        return [float(x) for x in total]

    def losses(self, tool: str, table: dict[str, Any], values: Sequence[Any]) -> list[float]:
        """The loss with ``table[tool]`` set to each of ``values``: every plan under every
        value simulated in one batch (`SimulatedTestbed.call_times`)."""
        np, tools, params = self.np, self.tools, self.params
        saved = table.get(tool)
        variants = []
        for v in values:
            table[tool] = v
            variants.append(self.estimate(tool))
        if saved is None:
            table.pop(tool, None)
        else:
            table[tool] = saved
        bed = self.bed()
        g, pn = len(values), len(self.plans)
        cols = [i for i, t in enumerate(tools) if t == tool]
        rows: dict[str, Any] = {}
        for f in _FIELDS:
            base = np.array([getattr(params[t], f) for t in tools], dtype=np.float64)
            grid = np.tile(base, (g * pn, 1))
            per_value = np.repeat([float(getattr(p, f)) for p in variants], pn)
            grid[:, cols] = per_value[:, None]
            rows[f] = grid
        starts, ends = bed.call_times(tools, np.tile(self.plan_codes, (g, 1)), rows=rows)
        return self.scored(starts, ends, g)

    def loss_of(self, table: Mapping[str, float], model: ContentionModel) -> float:
        """The loss of the executed placements with ``table``'s shares under ``model``."""
        here = {t: self.estimate_with(t, table.get(t)) for t in self.distinct}
        bed = twin(here, self.device, oom_ms=self.oom_ms, residency=False, model=model)
        starts, ends = bed.call_times(self.tools, self.plan_codes)
        return self.scored(starts, ends, 1)[0]

    def table_losses(self, tables: Sequence[Mapping[str, float]],
                     models: Sequence[ContentionModel]) -> list[list[float]]:
        """The loss of each share table under each of ``models``, all simulated in one
        batch (each row under its model's physics; the tables' parameter rows are built
        once for every model)."""
        np, tools = self.np, self.tools
        g, pn, n = len(tables), len(self.plans), self.n
        beds = [self.bed(model) for model in models]
        key = tuple(tuple(sorted(t.items())) for t in tables)
        rows = self.table_rows.get(key)
        if rows is None:
            rows = {f: np.empty((g * pn, n)) for f in _FIELDS}
            for k, table in enumerate(tables):
                here = {t: self.estimate_with(t, table.get(t)) for t in self.distinct}
                for f in _FIELDS:
                    rows[f][k * pn:(k + 1) * pn, :] = [float(getattr(here[t], f))
                                                       for t in tools]
            self.table_rows.clear()
            self.table_rows[key] = rows
        k = len(models)
        starts, ends = beds[0].call_times(
            tools, np.tile(self.plan_codes, (g * k, 1)),
            rows={f: np.tile(v, (k, 1)) for f, v in rows.items()},
            models=[b.contention(tools) for b in beds], groups=np.repeat(np.arange(k), g * pn))
        flat = self.scored(starts, ends, g * k)
        return [flat[i * g:(i + 1) * g] for i in range(k)]

    def variant_losses(self, variants: Sequence[Mapping[str, ToolParams]]) -> list[float]:
        """The loss with each variant's tools' parameters in place of ``params`` (the
        others as they are), every plan under every variant in one batch."""
        np, tools, params = self.np, self.tools, self.params
        g, pn = len(variants), len(self.plans)
        bed = self.bed()
        rows: dict[str, Any] = {}
        for f in _FIELDS:
            base = np.array([float(getattr(params[t], f)) for t in tools])
            grid = np.tile(base, (g, 1))
            for k, variant in enumerate(variants):
                for j, t in enumerate(tools):
                    if t in variant:
                        grid[k, j] = float(getattr(variant[t], f))
            rows[f] = np.repeat(grid, pn, axis=0)
        starts, ends = bed.call_times(tools, np.tile(self.plan_codes, (g, 1)), rows=rows)
        return self.scored(starts, ends, g)

    # -- step 2: descent ----------------------------------------------------------------------

    def best_of(self, tool: str, table: dict[str, Any], current: Any,
                grid: Sequence[Any]) -> None:
        """Set ``table[tool]`` to the grid value with the lowest loss (ties: nearest
        ``current``; losses rounded so that float noise never decides)."""
        scored = [(round(x, 9), abs(v - current), v)
                  for x, v in zip(self.losses(tool, table, grid), grid, strict=True)]
        table[tool] = min(scored)[2]
        self.params[tool] = self.estimate(tool)

    def rescale(self, tool: str, starts: Any, ends: Any) -> None:
        """Scale the tool's declared CPU time by what its CPU runs ask of it (measured over
        predicted run times, runs-weighted, times the current scale) where that disagrees
        with the declaration like a measurement does (`AGREE_WITHIN` or 3 standard
        errors), else by the two blended like `model.estimate_params` blends them."""
        cols = [j for j, t in enumerate(self.tools) if t == tool]
        mask = self.on_cpu[:, cols] * self.weight[:, None]
        predicted = float(((ends - starts)[:, cols] * mask).sum())
        count = float(mask.sum())
        if predicted <= 0 or count <= 0:
            return
        # the prediction is about linear in the declared time
        asked = self.cpu_scale.get(tool, 1.0) * float(
            (self.seen_run[:, cols] * mask).sum()) / predicted
        if abs(asked - 1.0) <= max(AGREE_WITHIN, 3.0 * self.cv / count**0.5):
            asked = (PRIOR_WEIGHT + count * asked) / (PRIOR_WEIGHT + count)
        self.cpu_scale[tool] = min(MAX_CPU_SCALE, max(1.0 / MAX_CPU_SCALE, asked))

    def rescale_cpu(self, tool: str) -> None:
        """`rescale` one tool from a simulation of the fit as it stands."""
        starts, ends = self.bed().call_times(self.tools, self.plan_codes)
        self.rescale(tool, starts, ends)
        self.params[tool] = self.estimate(tool)

    def warm_sweep(self) -> None:
        """A warm refit: every unmeasured CPU time rescaled from one simulation, then a few
        steepest-descent moves (`_sweep`)."""
        if self.unsolo:
            starts, ends = self.bed().call_times(self.tools, self.plan_codes)
            for tool in sorted(self.unsolo):
                self.rescale(tool, starts, ends)
            self.params.update({t: self.estimate(t) for t in self.unsolo})
        _sweep(self.distinct, self.gpu_shared, self.cpu_shared, self.shares, self.threads,
               self.specs, self.thread_grid, self.estimate, self.params, self.variant_losses,
               len(self.plans) * self.n)

    def descend(self, offset: int, total: int) -> ContentionFit | None:
        """``total`` tool updates from ``offset`` in the rotating tool order: each tool's
        share and threads set to their best grid values; an incomplete fit where the
        deadline stops it (None: done)."""
        distinct = self.distinct
        for done in range(total):
            position = offset + done
            tool = distinct[position % len(distinct)]
            if done and self.late():
                return ContentionFit(self.shares, self.threads, complete=False,
                                     resume_at=position, visits_left=total - done,
                                     model=self.model, selected_at=self.selected_at,
                                     cpu_scale=self.cpu_scale)
            if tool in self.gpu_shared:
                self.best_of(tool, self.shares,
                             self.shares.get(tool, self.specs[tool].gpu_share), SHARE_GRID)
            if tool in self.cpu_shared:
                self.best_of(tool, self.threads, self.threads.get(tool, 1), self.thread_grid)
            if tool in self.unsolo:
                self.rescale_cpu(tool)
        return None

    # -- step 3: which physics ----------------------------------------------------------------

    def select(self, start: ContentionFit | None, runs: int,
               screen: int | None) -> ContentionFit:
        """Which contention model explains the executed placements best: the current one as
        fitted (and its shares scaled together: a joint move), each other screened at each
        value of its tunable (`CANDIDATE_MODELS`) from the fitted and the declared shares,
        and those scaled together (`GROUP_SCALES`); `SCREEN_MODELS` others a refit, each
        against the current model on the same evidence. Runs once the shape's runs have
        doubled since the last selection."""
        shares, threads, cpu_scale = self.shares, self.threads, self.cpu_scale
        selected_at, specs = self.selected_at, self.specs
        if not self.gpu_shared:
            return ContentionFit(shares, threads, model=self.model, selected_at=selected_at,
                                 cpu_scale=cpu_scale)
        screening = start is not None and bool(start.screen_left)
        if not screening and selected_at and runs < 2 * selected_at:  # selected on half or more
            return ContentionFit(shares, threads, model=self.model, selected_at=selected_at,
                                 losses=dict(start.losses) if start else {},
                                 cpu_scale=cpu_scale)
        if self.late():  # the selection runs at the next refit
            return ContentionFit(shares, threads, complete=False, model=self.model,
                                 selected_at=selected_at, cpu_scale=cpu_scale,
                                 screen_left=start.screen_left if start else (),
                                 screen_best=start.screen_best if start else None)
        fitted = dict(shares)
        mine = self.model
        found = dict(start.losses) if screening and start is not None else {}
        left = [i for i in (start.screen_left if screening and start is not None else
                            range(len(CANDIDATE_MODELS))) if CANDIDATE_MODELS[i] != mine]
        since = selected_at if screening else max(1, runs)
        screened = start.screen_best if screening and start is not None else None
        group = sorted(self.gpu_shared)
        starts: list[dict[str, float]] = [fitted, {}]
        tables = list(starts) + [
            {**t, **{g: _on_grid(t.get(g, specs[g].gpu_share) * f) for g in group}}
            for t in starts for f in GROUP_SCALES]
        step = len(left) if screen is None else max(1, screen)
        chunk, left = left[:step], left[step:]
        # the current model and this refit's candidates in one batched simulation
        ours, *theirs = self.table_losses(tables, [mine, *(CANDIDATE_MODELS[i] for i in chunk)])
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
                # strictly better only: on a tie the earlier screened (model, table) stays, so
                # the order of `CANDIDATE_MODELS` decides, not float noise
                if screened is None or ratio < screened[0] - 1e-12:
                    screened = (ratio, index, tuple(sorted(table.items())))
        if left:
            return ContentionFit(fitted, threads, complete=False, model=mine, selected_at=since,
                                 losses=found, cpu_scale=cpu_scale, screen_left=tuple(left),
                                 screen_best=screened)
        if screened is None or screened[0] >= SELECT_BELOW:
            return ContentionFit(fitted, threads, model=mine, selected_at=since,
                                 losses=found, cpu_scale=cpu_scale)
        return self.adopt(CANDIDATE_MODELS[screened[1]], dict(screened[2]), found, since)

    def adopt(self, model: ContentionModel, table: dict[str, float], found: dict[str, float],
              since: int) -> ContentionFit:
        """Take the screened ``model`` with its best share ``table``, then fit its shares
        tool by tool (as far as the deadline lets)."""
        shares = self.shares
        shares.clear()
        shares.update(table)
        self.model = model
        self.params.update({t: self.estimate(t) for t in self.distinct})
        complete = True
        for tool in sorted(self.gpu_shared):  # the selected model's shares, tool by tool
            if self.late():
                complete = False
                break
            self.best_of(tool, shares, shares.get(tool, self.specs[tool].gpu_share), SHARE_GRID)
        found[model.label] = min(found.get(model.label, math.inf), self.loss_of(shares, model))
        return ContentionFit(dict(shares), self.threads, complete=complete, model=model,
                             selected_at=since, losses=found, cpu_scale=self.cpu_scale)


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
