"""Resident model weights in the batched simulator: what a step starts from, and per row.

`Residency` is what a step starts from (the testbed's resident weights and each call's
model); `plan_gpu` is the one rule for a step's GPU weights, which the testbed and the
lockstep simulation both call. A batch of mappings shares few distinct plans: rows whose
GPU-placed calls first use the models in the same order, and place alike the calls without a
model that may need room (`room_calls`), evict and load alike, so `row_models` plans once
per such group and remembers plans across a search's simulations
(`planned`), where a plan per row would cost more than the simulation itself.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.residency import WarmModel, plan_room


@dataclass(frozen=True)
class Residency:
    """Resident model weights a step starts from, and which model each call uses.

    ``gpu``: (model, weights MB) resident on the GPU, least recently used first; ``host``:
    models loaded in host memory (unbounded); ``models``: per call its model or None;
    ``weights_mb``/``load_gpu_ms``/``load_cpu_ms``: per model."""

    models: tuple[str | None, ...] = ()
    gpu: tuple[tuple[str, float], ...] = ()
    host: frozenset[str] = frozenset()
    host_order: tuple[str, ...] = ()
    """``host`` in the order the models were loaded (for telemetry)."""
    weights_mb: Mapping[str, float] = field(default_factory=dict)
    load_gpu_ms: Mapping[str, float] = field(default_factory=dict)
    load_cpu_ms: Mapping[str, float] = field(default_factory=dict)
    keep_warm: frozenset[str] = frozenset()
    """Models never evicted for another model (their tools' ``keep_warm`` hint)."""
    others: tuple[tuple[tuple[str, float], ...], ...] = ()
    """The resident weights of GPUs 1, 2, ... on a testbed with several (``gpu`` is GPU 0's);
    the batched simulator itself models one GPU."""

    @property
    def idle(self) -> bool:
        """No call uses a model and no weights are resident: the step is today's model."""
        return not self.gpu and all(m is None for m in self.models)


@dataclass(frozen=True)
class GpuPlan:
    """What a step does to the GPU-resident weights (see `plan_gpu`)."""

    base_mb: float
    """Background VRAM plus every weight resident during the step (the ledger's base)."""
    loaded: tuple[str, ...]
    no_room: frozenset[str]
    evicted: tuple[tuple[str, ...], ...]
    """Per entry of ``wanted``, in order, the resident models evicted to make its room
    (``()`` where it fit, or could not get room)."""
    after: tuple[tuple[str, float], ...]
    """GPU-resident (model, MB) after the step, least recently used first."""


def plan_gpu(
    resident: Sequence[tuple[str, float]], wanted: Sequence[tuple[str | None, float]],
    weights_mb: Mapping[str, float], *, budget_mb: float, background_mb: float,
    keep_warm: frozenset[str] = frozenset(), demote: frozenset[str] = frozenset(),
) -> GpuPlan:
    """The step's rule for GPU weights. ``wanted``: in call order, the models of the step's
    GPU-placed calls at their first use, each with the working memory (``vram_mb``) of that
    call, and the step's GPU-placed calls without a model as ``(None, vram_mb)``. The models
    are protected; in that order each entry gets room for its working memory plus its
    model's weights (when not resident), evicting least recently used others by
    `residency.plan_room` against the budget less the background less the resident weights
    (as the ledger makes room for a call, with or without a model). A model not resident
    that cannot get room is in ``no_room`` (a resident one just keeps what there is; a call
    without a model that cannot get room evicts nothing and meets the full GPU). Models in
    ``keep_warm`` are never evicted; models in ``demote`` (the step's models it places only
    off this GPU, `residency.demoted`) are the first candidates. The used models become the
    most recently used, in first-use order. The testbed and the batched simulator both call
    this."""
    order = [m for m, _ in wanted if m is not None]
    current = [x for x in resident if x[0] in demote] + [
        x for x in resident if x[0] not in demote]
    capacity_mb = budget_mb - background_mb
    protect = frozenset(order)
    loaded: list[str] = []
    no_room: set[str] = set()
    evicted: list[tuple[str, ...]] = []
    for model, working_mb in wanted:
        # the model to load (None: a call without one, or its model already resident)
        cold = model if model is not None and all(m != model for m, _ in current) else None
        held = 0.0
        for _, mb in current:
            held += mb
        need = working_mb if cold is None else weights_mb[cold] + working_mb
        out = plan_room([WarmModel(m, mb, keep_warm=m in keep_warm) for m, mb in current],
                        need_mb=need,
                        free_mb=capacity_mb - held, protect=protect)
        if out is None:
            if cold is not None:
                no_room.add(cold)
            evicted.append(())
            continue
        current = [(m, mb) for m, mb in current if m not in out]
        if cold is not None:
            current.append((cold, weights_mb[cold]))
            loaded.append(cold)
        evicted.append(out)
    used = [(m, mb) for m, mb in current if m in protect]
    used.sort(key=lambda x: order.index(x[0]))
    after = tuple([(m, mb) for m, mb in current if m not in protect] + used)
    base = background_mb
    for _, mb in after:
        base += mb
    return GpuPlan(min(base, budget_mb), tuple(loaded), frozenset(no_room), tuple(evicted),
                   after)


@dataclass
class RowModels:
    """Per-row residency inputs of a lockstep run (see `row_models`)."""

    base_mb: Any
    """(m,) ledger base per row: background plus resident weights."""
    no_room: Any
    """(m, n) the call's model could not get room on the GPU in that row."""
    gpu_load: Any
    """(m, n) load_gpu_ms of the call's model where that row loads it this step, else 0."""
    model_index: list[int]
    """Per call, its model's index into ``cpu_load`` (-1: no model)."""
    cpu_load: list[float]
    """Per model, load_cpu_ms when it is not loaded in host memory yet, else 0."""
    group: Any
    """(m,) each row's residency group (rows whose GPU calls first use the models alike)."""
    evicted: tuple[tuple[str, ...], ...]
    """Per group, the resident models its plan evicts."""
    after: tuple[tuple[tuple[str, float], ...], ...]
    """Per group, the GPU-resident (model, MB) its plan leaves (`GpuPlan.after`)."""

    @property
    def host_loads(self) -> bool:
        return any(x > 0 for x in self.cpu_load)


def row_models(
    np: Any, codes: Any, res: Residency, budget: float, bg_mb: float, vram: Sequence[float]
) -> RowModels:
    """Plan each row's GPU weights: rows are grouped by the order in which their GPU-placed
    calls first use each model and place the calls without a model that may need room
    (`room_calls`), and `plan_gpu` runs once per group (not once per row)."""
    m, n = codes.shape
    names = sorted({x for x in res.models if x is not None})
    index = {name: k for k, name in enumerate(names)}
    model_index = [-1 if x is None else index[x] for x in res.models]
    cpu_load = [0.0 if x in res.host else float(res.load_cpu_ms.get(x, 0.0)) for x in names]
    free = room_calls(res, names, budget, bg_mb, vram)
    if not names and not free:
        plan = plan_gpu(res.gpu, (), {}, budget_mb=budget, background_mb=bg_mb,
                        keep_warm=res.keep_warm)
        return RowModels(np.full(m, plan.base_mb), np.zeros((m, n), dtype=bool),
                          np.zeros((m, n)), model_index, cpu_load,
                          np.zeros(m, dtype=np.int64), ((),),  # one group, nothing evicted
                          (plan.after,))
    # per row: each model's first GPU-placed call, then whether each of ``free`` is on the
    # GPU (its own index), n where none
    first = np.full((m, len(names) + len(free)), n, dtype=np.int64)
    for j in reversed(range(n)):
        k = model_index[j]
        if k >= 0:
            first[:, k] = np.where(codes[:, j] != 2, j, first[:, k])
    for c, j in enumerate(free):
        first[:, len(names) + c] = np.where(codes[:, j] != 2, j, n)
    keys, inverse = unique_rows(np, first, n + 1)
    cols = {k: [j for j in range(n) if model_index[j] == k] for k in range(len(names))}
    entry_names: list[str | None] = [*names, *(None for _ in free)]
    evicted: list[tuple[str, ...]] = []
    after: list[tuple[tuple[str, float], ...]] = []
    # each group's plan fills one row of these; the rows then take their group's at once
    base_g = np.empty(len(keys))
    no_room_g = np.zeros((len(keys), n), dtype=bool)
    gpu_load_g = np.zeros((len(keys), n))
    for g, key in enumerate(keys.tolist()):
        wanted = tuple((entry_names[k], float(vram[key[k]]))
                       for k in sorted(range(len(key)), key=lambda k: key[k]) if key[k] < n)
        plan = planned(res, wanted, budget, bg_mb,
                        frozenset(names[k] for k in range(len(names)) if key[k] == n))
        # (a model of the batch that no GPU-placed call uses: `residency.demoted`)
        evicted.append(tuple(e for out in plan.evicted for e in out))
        after.append(plan.after)
        base_g[g] = plan.base_mb
        for name in plan.no_room:
            no_room_g[g, cols[index[name]]] = True
        for name in plan.loaded:
            gpu_load_g[g, cols[index[name]]] = float(res.load_gpu_ms.get(name, 0.0))
    return RowModels(base_g[inverse], no_room_g[inverse], gpu_load_g[inverse], model_index,
                      cpu_load, inverse, tuple(evicted), tuple(after))


def room_calls(res: Residency, names: Sequence[str], budget: float, bg_mb: float,
               vram: Sequence[float]) -> list[int]:
    """The calls without a model whose working memory may need an eviction (`plan_gpu`):
    every other one fits beside the resident weights and every model of the step loaded,
    so that it never changes a plan and rows need not be told apart by it."""
    if not res.gpu:
        return []
    resident = {m for m, _ in res.gpu}
    held = sum(mb for _, mb in res.gpu) + sum(
        res.weights_mb.get(x, 0.0) for x in names if x not in resident)
    room = budget - bg_mb - held - 1e-6  # a hair below: plan_room sums in its own order
    return [j for j, x in enumerate(res.models) if x is None and vram[j] > room]


_PLANS: OrderedDict[tuple[object, ...], GpuPlan] = OrderedDict()
"""`plan_gpu` answers by their inputs (a search's simulations of one step ask the same
groups again and again), oldest forgotten first past `MAX_PLANS`."""
MAX_PLANS = 4096


def planned(res: Residency, wanted: tuple[tuple[str | None, float], ...], budget: float,
             bg_mb: float, demote: frozenset[str]) -> GpuPlan:
    """`plan_gpu` for one group of rows, remembered by every input it reads (its
    ``weights_mb`` only for the wanted models). The plan is shared: read it only."""
    key = (res.gpu, wanted, tuple(res.weights_mb.get(m) for m, _ in wanted if m is not None),
           budget, bg_mb, res.keep_warm, demote)
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_gpu(res.gpu, wanted, res.weights_mb, budget_mb=budget, background_mb=bg_mb,
                        keep_warm=res.keep_warm, demote=demote)
        _PLANS[key] = plan
        while len(_PLANS) > MAX_PLANS:
            _PLANS.popitem(last=False)
    return plan


def unique_rows(np: Any, rows: Any, base: int) -> tuple[Any, Any]:
    """``np.unique(rows, axis=0, return_inverse=True)`` (the inverse flat) for rows of values
    in ``range(base)``: one int64 per row where that fits (the same order, much faster)."""
    if base ** rows.shape[1] >= 1 << 62:
        keys, inverse = np.unique(rows, axis=0, return_inverse=True)
        return keys, inverse.reshape(-1)
    code = np.zeros(rows.shape[0], dtype=np.int64)
    for k in range(rows.shape[1]):
        code = code * base + rows[:, k]
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return rows[first], inverse.reshape(-1)
