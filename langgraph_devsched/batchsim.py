"""Exact noise-free makespans of many mappings of one step at once (vectorised with numpy).

The brute-force oracle needs the makespan of every one of the 3^n mappings of a batch. Running
`SimulatedTestbed.simulate` 59,049 times for 10 calls takes seconds; this module runs the *same*
discrete-event model on all mappings in lockstep, one numpy row per mapping, and repeats the
simulation's floating-point operations in the same order, so every makespan is bit-identical to
``SimulatedTestbed.makespan`` (tests compare them on random mappings).

Use it through `SimulatedTestbed.product_makespans`:

>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40)},
...     vram_budget_mb=8000)
>>> [float(x) for x in bed.product_makespans(["fft"], [("gpu_now", "cpu")])]
[42.0, 30.0]
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, get_args

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.residency import WarmModel, plan_room


class ToolParams(Protocol):
    """What the simulation reads of one tool (`testbed.ToolParams` is one)."""

    @property
    def cpu_ms(self) -> float: ...
    @property
    def gpu_ms(self) -> float: ...
    @property
    def transfer_ms(self) -> float: ...
    @property
    def vram_mb(self) -> float: ...
    @property
    def gpu_share(self) -> float: ...
    @property
    def cpu_threads(self) -> int: ...


class BackgroundLoad(Protocol):
    """What the simulation reads of the background load (`testbed.BackgroundLoad` is one)."""

    @property
    def vram_mb(self) -> float: ...
    @property
    def gpu_share(self) -> float: ...
    @property
    def cpu_threads(self) -> int: ...

Physics = Literal["processor_sharing", "time_slicing", "idle_queue", "bandwidth"]
"""How computing GPU calls slow each other (see ``docs/physics.md``)."""
PHYSICS: tuple[Physics, ...] = get_args(Physics)


def check_physics(name: str) -> Physics:
    """``name`` as a `Physics`, or `ValueError` listing the valid names."""
    if name not in PHYSICS:
        raise ValueError(f"unknown physics {name!r}; valid: {', '.join(PHYSICS)}")
    return cast(Physics, name)


@dataclass(frozen=True)
class Contention:
    """The GPU contention physics of a step (``docs/physics.md``); with k calls computing
    and the background's share b, every computing call progresses at 1/D when D > 1, else 1:

    * ``processor_sharing``: D = b + the sum of the computing calls' shares;
    * ``time_slicing``: D = b + k, times ``1 + slice_overhead`` when k >= 2;
    * ``idle_queue``: only the call computing longest (ties: call order) progresses, with
      D = b + its share; the others hold their VRAM and wait;
    * ``bandwidth``: D = b + the sum of share_i * (1 + mem_bound_i * (k - 1)).

    ``mem_bound``: per call, in call order (``bandwidth`` only)."""

    physics: Physics = "processor_sharing"
    slice_overhead: float = 0.0
    mem_bound: tuple[float, ...] = ()

    @property
    def default(self) -> bool:
        return self.physics == "processor_sharing"


_EPS = 1e-9
_CHUNK = 1 << 16
# phases, as in testbed._Simulation (_LOAD: waiting for model weights, then the next phase)
_QUEUED, _TRANSFER, _GPU, _CPU, _OOM, _DONE, _LOAD = range(7)


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
    evicted: Mapping[str, tuple[str, ...]]
    after: tuple[tuple[str, float], ...]
    """GPU-resident (model, MB) after the step, least recently used first."""


def plan_gpu(
    resident: Sequence[tuple[str, float]], wanted: Sequence[tuple[str, float]],
    weights_mb: Mapping[str, float], *, budget_mb: float, background_mb: float,
    keep_warm: frozenset[str] = frozenset(), demote: frozenset[str] = frozenset(),
) -> GpuPlan:
    """The step's rule for GPU weights. ``wanted``: the models of the step's GPU-placed
    calls, in first-use call order, each with the working memory (``vram_mb``) of its first
    such call. They are protected; in that order each one gets room for its weights (when not
    resident) plus that working memory, evicting least recently used others by
    `residency.plan_room` against the budget less the background less the resident weights.
    A model not resident that cannot get room is in ``no_room`` (a resident one just keeps
    what there is). Models in ``keep_warm`` are never evicted; models in ``demote`` (the
    step's models it places only off this GPU, `residency.demoted`) are the first
    candidates. The used models become the most recently used, in first-use order. The
    testbed and the batched simulator both call this."""
    order = [m for m, _ in wanted]
    current = [x for x in resident if x[0] in demote] + [
        x for x in resident if x[0] not in demote]
    capacity_mb = budget_mb - background_mb
    protect = frozenset(order)
    loaded: list[str] = []
    no_room: set[str] = set()
    evicted: dict[str, tuple[str, ...]] = {}
    for model, working_mb in wanted:
        warm = any(m == model for m, _ in current)
        held = 0.0
        for _, mb in current:
            held += mb
        need = working_mb if warm else weights_mb[model] + working_mb
        out = plan_room([WarmModel(m, mb, keep_warm=m in keep_warm) for m, mb in current],
                        need_mb=need,
                        free_mb=capacity_mb - held, protect=protect)
        if out is None:
            if not warm:
                no_room.add(model)
            continue
        current = [(m, mb) for m, mb in current if m not in out]
        if not warm:
            current.append((model, weights_mb[model]))
            loaded.append(model)
        evicted[model] = out
    used = [(m, mb) for m, mb in current if m in protect]
    used.sort(key=lambda x: order.index(x[0]))
    after = tuple([(m, mb) for m, mb in current if m not in protect] + used)
    base = background_mb
    for _, mb in after:
        base += mb
    return GpuPlan(min(base, budget_mb), tuple(loaded), frozenset(no_room), evicted, after)


@dataclass
class _RowModels:
    """Per-row residency inputs of a lockstep run (see `_row_models`)."""

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


def _row_models(
    np: Any, codes: Any, res: Residency, budget: float, bg_mb: float, vram: Sequence[float]
) -> _RowModels:
    """Plan each row's GPU weights: rows are grouped by the order in which their GPU-placed
    calls first use each model, and `plan_gpu` runs once per group (not once per row)."""
    m, n = codes.shape
    names = sorted({x for x in res.models if x is not None})
    index = {name: k for k, name in enumerate(names)}
    model_index = [-1 if x is None else index[x] for x in res.models]
    cpu_load = [0.0 if x in res.host else float(res.load_cpu_ms.get(x, 0.0)) for x in names]
    if not names:
        plan = plan_gpu(res.gpu, (), {}, budget_mb=budget, background_mb=bg_mb,
                        keep_warm=res.keep_warm)
        return _RowModels(np.full(m, plan.base_mb), np.zeros((m, n), dtype=bool),
                          np.zeros((m, n)), model_index, cpu_load,
                          np.zeros(m, dtype=np.int64), ((),),  # one group, nothing evicted
                          (plan.after,))
    first = np.full((m, len(names)), n, dtype=np.int64)
    for j in reversed(range(n)):
        k = model_index[j]
        if k >= 0:
            first[:, k] = np.where(codes[:, j] != 2, j, first[:, k])
    keys, inverse = _unique_rows(np, first, n + 1)
    cols = {k: [j for j in range(n) if model_index[j] == k] for k in range(len(names))}
    evicted: list[tuple[str, ...]] = []
    after: list[tuple[tuple[str, float], ...]] = []
    # each group's plan fills one row of these; the rows then take their group's at once
    base_g = np.empty(len(keys))
    no_room_g = np.zeros((len(keys), n), dtype=bool)
    gpu_load_g = np.zeros((len(keys), n))
    for g, key in enumerate(keys.tolist()):
        wanted = tuple((names[k], float(vram[key[k]]))
                       for k in sorted(range(len(names)), key=lambda k: key[k]) if key[k] < n)
        plan = _planned(res, wanted, budget, bg_mb,
                        frozenset(names[k] for k in range(len(names)) if key[k] == n))
        # (a model of the batch that no GPU-placed call uses: `residency.demoted`)
        evicted.append(tuple(e for out in plan.evicted.values() for e in out))
        after.append(plan.after)
        base_g[g] = plan.base_mb
        for name in plan.no_room:
            no_room_g[g, cols[index[name]]] = True
        for name in plan.loaded:
            gpu_load_g[g, cols[index[name]]] = float(res.load_gpu_ms.get(name, 0.0))
    return _RowModels(base_g[inverse], no_room_g[inverse], gpu_load_g[inverse], model_index,
                      cpu_load, inverse, tuple(evicted), tuple(after))


_PLANS: OrderedDict[tuple[object, ...], GpuPlan] = OrderedDict()
"""`plan_gpu` answers by their inputs (a search's simulations of one step ask the same
groups again and again), oldest forgotten first past `MAX_PLANS`."""
MAX_PLANS = 4096


def _planned(res: Residency, wanted: tuple[tuple[str, float], ...], budget: float,
             bg_mb: float, demote: frozenset[str]) -> GpuPlan:
    """`plan_gpu` for one group of rows, remembered by every input it reads (its
    ``weights_mb`` only for the wanted models). The plan is shared: read it only."""
    key = (res.gpu, wanted, tuple(res.weights_mb.get(m) for m, _ in wanted), budget, bg_mb,
           res.keep_warm, demote)
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_gpu(res.gpu, wanted, res.weights_mb, budget_mb=budget, background_mb=bg_mb,
                        keep_warm=res.keep_warm, demote=demote)
        _PLANS[key] = plan
        while len(_PLANS) > MAX_PLANS:
            _PLANS.popitem(last=False)
    return plan


def _unique_rows(np: Any, rows: Any, base: int) -> tuple[Any, Any]:
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


def evicted_models(
    params: Sequence[ToolParams], codes: Any, *, vram_budget_mb: float,
    background: BackgroundLoad, residency: Residency | None, **_: Any,
) -> list[tuple[str, ...]]:
    """Per row of option codes, the resident models its step evicts from the GPU to make
    room (by `plan_gpu`, as the step itself would); ``()`` without resident models."""
    np = _numpy()
    codes = np.asarray(codes)
    if residency is None or residency.idle or not residency.gpu:
        return [() for _ in range(len(codes))]
    rm = _row_models(np, codes, residency, vram_budget_mb, background.vram_mb,
                     [p.vram_mb for p in params])
    return [rm.evicted[g] for g in rm.group.tolist()]


StepEnd = tuple[tuple[tuple[str, float], ...], tuple[str, ...]]
"""What a step leaves resident: the GPU (model, MB), least recently used first, and the
models it loads into host memory (by name)."""


def step_ends(
    params: Sequence[ToolParams], codes: Any, *, vram_budget_mb: float,
    background: BackgroundLoad, residency: Residency | None, **_: Any,
) -> tuple[Any, list[StepEnd]]:
    """Per row of option codes, the index of the resident-model state its step leaves, and
    those distinct states (`StepEnd`), as the step itself would leave them: the GPU weights
    by `plan_gpu`, and in host memory every model with a host load time one of whose calls
    runs on the CPU (a `cpu` call, a `gpu_queued` one whose model gets no room or whose
    VRAM is over the budget, a `gpu_now` one that does not fit at launch: all known at
    launch, so noise never changes them). Without resident models: one state, unchanged."""
    np = _numpy()
    codes = np.asarray(codes, dtype=np.int8)
    m, n = codes.shape
    if residency is None or residency.idle:
        return np.zeros(m, dtype=np.int64), [(() if residency is None else residency.gpu, ())]
    vram = [p.vram_mb for p in params]
    rm = _row_models(np, codes, residency, vram_budget_mb, background.vram_mb, vram)
    budget = float(vram_budget_mb)
    capacity = budget - rm.base_mb
    in_use = np.array(rm.base_mb, dtype=np.float64)
    on_cpu = codes == 2
    for j in range(n):  # the launch, as `_run` does it: gpu_now in call order, then queued
        now = codes[:, j] == 0
        fits = now & ~rm.no_room[:, j] & ~(vram[j] > capacity) & (in_use + vram[j] <= budget + _EPS)
        in_use = np.where(fits, in_use + vram[j], in_use)
        on_cpu[:, j] |= now & ~fits
    for j in range(n):
        on_cpu[:, j] |= (codes[:, j] == 1) & (rm.no_room[:, j] | (vram[j] > capacity))
    names = sorted({x for x in residency.models if x is not None})
    mask = np.zeros(m, dtype=np.int64)
    for k in range(len(names)):
        cols = [j for j in range(n) if rm.model_index[j] == k]
        if rm.cpu_load[k] > 0 and cols:
            mask |= np.where(on_cpu[:, cols].any(axis=1), 1 << k, 0)
    keys, index = np.unique(rm.group.astype(np.int64) * (1 << len(names)) + mask,
                            return_inverse=True)
    ends: list[StepEnd] = []
    for key in keys.tolist():
        g, bits = divmod(int(key), 1 << len(names))
        ends.append((rm.after[g], tuple(x for k, x in enumerate(names) if bits >> k & 1)))
    return index.reshape(-1), ends


_CODE = {o: i for i, o in enumerate(DEVICE_OPTIONS)}  # gpu_now 0, gpu_queued 1, cpu 2


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with matplotlib (the plots extra)
        raise ImportError(
            "the batched simulator needs numpy: pip install numpy"
        ) from None
    return numpy


def require_numpy() -> Any:
    """numpy, or an `ImportError` that says how to install it."""
    return _numpy()


def product_codes(choices: Sequence[Sequence[DeviceOption]]) -> Any:
    """Every mapping of ``itertools.product(*choices)`` as a row of option codes (same order)."""
    np = _numpy()
    n = len(choices)
    codes = [np.array([_CODE[o] for o in c], dtype=np.int8) for c in choices]
    total = 1
    for c in codes:
        total *= len(c)
    out = np.empty((total, n), dtype=np.int8)
    repeat = total
    tile = 1
    for j, c in enumerate(codes):
        repeat //= len(c)
        out[:, j] = np.tile(np.repeat(c, repeat), tile)
        tile *= len(c)
    return out


def makespans(
    params: Sequence[ToolParams],
    codes: Any,
    *,
    vram_budget_mb: float,
    cpu_cores: int,
    background: BackgroundLoad,
    oom_detect_ms: float,
    prune: bool = False,
    residency: Residency | None = None,
    contention: Contention | None = None,
) -> Any:
    """Noise-free makespan of each row of ``codes`` (shape (m, n), option codes per call).

    With ``prune=True`` (branch and bound in one level), rows that provably cannot be optimal
    are not simulated and come back as ``inf``: every row whose admissible lower bound does not
    exceed the best makespan found among the most promising rows is simulated, so the minimum
    and every row tied with it are exact.
    """
    np = _numpy()
    codes = np.asarray(codes, dtype=np.int8)
    if codes.ndim != 2 or codes.shape[1] != len(params):
        raise ValueError(f"codes must have shape (m, {len(params)}), got {codes.shape}")
    machine = (float(vram_budget_mb), cpu_cores, background, float(oom_detect_ms), residency,
               contention)
    if not prune:
        return _chunked(np, params, codes, machine)
    lb = lower_bounds(params, codes, vram_budget_mb=vram_budget_mb, cpu_cores=cpu_cores,
                      background=background, oom_detect_ms=oom_detect_ms,
                      residency=residency)
    out = np.full(codes.shape[0], np.inf)
    first = np.argsort(lb, kind="stable")[:_INCUMBENT_ROWS]
    out[first] = _chunked(np, params, codes[first], machine)
    incumbent = out[first].min()
    rest = np.flatnonzero((lb <= incumbent) & np.isinf(out))
    if len(rest):
        out[rest] = _chunked(np, params, codes[rest], machine)
    return out


_INCUMBENT_ROWS = 256


def _chunked(np: Any, params: Sequence[ToolParams], codes: Any, machine: tuple[Any, ...]) -> Any:
    out = np.empty(codes.shape[0], dtype=np.float64)
    budget, cores, bg, oom_ms, residency, contention = machine
    for lo in range(0, codes.shape[0], _CHUNK):
        out[lo : lo + _CHUNK] = _run(np, params, codes[lo : lo + _CHUNK], budget, cores, bg,
                                     oom_ms, residency=residency, contention=contention)
    return out


def lower_bounds(
    params: Sequence[ToolParams],
    codes: Any,
    *,
    vram_budget_mb: float,
    cpu_cores: int,
    background: BackgroundLoad,
    oom_detect_ms: float,
    residency: Residency | None = None,
    contention: Contention | None = None,
) -> Any:
    """An admissible lower bound on each row's makespan (slightly loosened for float safety).

    The largest of: each call's solo time on the device it ends up on (a `gpu_now` that does
    not fit at launch pays the OOM detection, then the CPU); the CPU work in thread-ms over the
    free cores; the GPU work weighted by share (the GPU completes at most ``1 - bg/D`` of
    share-weighted work per ms, D the largest possible demand) after the shortest transfer.
    With resident models, the ledger base is each row's resident weights too, a call whose
    model gets no room is off the GPU, and a call waiting for a load ends no earlier than it.
    The bound holds under every `Contention` physics (none is faster than processor
    sharing at any instant), so ``contention`` is accepted and not needed.
    """
    del contention
    np = _numpy()
    m = codes.shape[0]
    budget = float(vram_budget_mb)
    rm = None if residency is None or residency.idle else _row_models(
        np, np.asarray(codes, dtype=np.int8), residency, budget, float(background.vram_mb),
        [p.vram_mb for p in params])
    if rm is None:
        capacity = budget - float(background.vram_mb)
        in_use = np.full(m, float(background.vram_mb))
    else:
        capacity = budget - rm.base_mb
        in_use = rm.base_mb.copy()
    free_cores = max(1, cpu_cores - background.cpu_threads)
    solo = np.zeros(m)
    cpu_work = np.zeros(m)
    gpu_work = np.zeros(m)
    gpu_demand = np.zeros(m)
    first_transfer = np.full(m, np.inf)
    for j, p in enumerate(params):
        col = codes[:, j]
        if rm is not None:
            blocked = rm.no_room[:, j] | (p.vram_mb > capacity)
            fits = (col == 0) & ~blocked & (in_use + p.vram_mb <= budget + _EPS)
            in_use = np.where(fits, in_use + p.vram_mb, in_use)
            oom = (col == 0) & ~fits
            on_gpu = fits | ((col == 1) & ~blocked)
            k = rm.model_index[j]
            cold = rm.cpu_load[k] if k >= 0 else 0.0
            gpu_time = rm.gpu_load[:, j] + p.transfer_ms + p.gpu_ms
            cpu_time = np.maximum(np.where(oom, oom_detect_ms, 0.0), cold) + p.cpu_ms
            t = np.where(on_gpu, gpu_time, cpu_time)
        else:
            if p.vram_mb > capacity:
                on_gpu = np.zeros(m, dtype=bool)
                oom = col == 0
            else:
                fits = (col == 0) & (in_use + p.vram_mb <= budget + _EPS)
                in_use = np.where(fits, in_use + p.vram_mb, in_use)
                oom = (col == 0) & ~fits
                on_gpu = fits | (col == 1)
            gpu_time = p.transfer_ms + p.gpu_ms
            t = np.where(on_gpu, gpu_time, np.where(oom, oom_detect_ms + p.cpu_ms, p.cpu_ms))
        solo = np.maximum(solo, t)
        cpu_work = cpu_work + np.where(on_gpu, 0.0, p.cpu_ms * p.cpu_threads)
        gpu_work = gpu_work + np.where(on_gpu, p.gpu_ms * p.gpu_share, 0.0)
        gpu_demand = gpu_demand + np.where(on_gpu, p.gpu_share, 0.0)
        first_transfer = np.where(on_gpu, np.minimum(first_transfer, p.transfer_ms), first_transfer)
    throughput = 1.0 - background.gpu_share / np.maximum(background.gpu_share + gpu_demand, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        gpu_bound = np.where(
            gpu_demand > 0,
            np.where(np.isinf(first_transfer), 0.0, first_transfer) + gpu_work / throughput,
            0.0,
        )
    bound = np.maximum(np.maximum(solo, cpu_work / free_cores), gpu_bound)
    return bound * (1.0 - 1e-9) - 1e-6


ROW_FIELDS = ("cpu_ms", "gpu_ms", "gpu_share", "cpu_threads")
"""Parameters that `call_times` may vary per row (one value per row and call)."""


def call_times(
    params: Sequence[ToolParams],
    codes: Any,
    *,
    vram_budget_mb: float,
    cpu_cores: int,
    background: BackgroundLoad,
    oom_detect_ms: float,
    rows: dict[str, Any] | None = None,
    residency: Residency | None = None,
    contention: Contention | None = None,
    models: Sequence[Contention | None] | None = None,
    groups: Any = None,
) -> tuple[Any, Any]:
    """Start and end time (ms from the step's start) of every call of every row of
    ``codes``, as two (m, n) arrays; ``rows`` may give any of `ROW_FIELDS` per row and call
    (an (m, n) array), overriding ``params`` there. Bit-identical to
    `SimulatedTestbed.simulate`'s ``start_ms``/``end_ms`` for the same parameters.

    ``models`` and ``groups``: each row runs its own contention physics, row ``i`` that of
    ``models[groups[i]]`` (instead of ``contention``), every row bit-identical to a run
    under that physics alone: several contention models' rows in one batch (a batch costs
    mostly per event, little per row)."""
    np = _numpy()
    codes = np.asarray(codes, dtype=np.int8)
    if codes.ndim != 2 or codes.shape[1] != len(params):
        raise ValueError(f"codes must have shape (m, {len(params)}), got {codes.shape}")
    unknown = set(rows or {}) - set(ROW_FIELDS)
    if unknown:
        raise ValueError(f"unknown row fields {sorted(unknown)}; valid: {', '.join(ROW_FIELDS)}")
    if codes.shape[0] == 0:  # no rows: nothing to simulate (the lockstep loop needs one)
        return np.zeros(codes.shape), np.zeros(codes.shape)
    mixed = None
    if models is not None:
        groups = np.asarray(groups, dtype=np.int64).reshape(-1)
        if len(groups) != codes.shape[0] or (len(groups) and (
                groups.min() < 0 or groups.max() >= len(models))):
            raise ValueError("groups: one index into models per row")
        mixed = _Mixed(np, list(models), groups, len(params))
    never_cpu = None
    if rows and (residency is None or residency.idle):
        never_cpu = _never_on_cpu(np, codes, [p.vram_mb for p in params],
                                  float(vram_budget_mb), float(background.vram_mb))
    first, inverse = _distinct_rows(np, codes, rows, groups if mixed else None,
                                    never_cpu) if rows else (None, None)
    if first is not None and rows:  # each distinct row simulated once (rows independent)
        codes = codes[first]
        rows = {f: np.asarray(v).reshape(-1, codes.shape[1])[first] for f, v in rows.items()}
        if mixed is not None:
            mixed = mixed.take(first)
    times = (np.zeros(codes.shape), np.zeros(codes.shape))
    _run(np, params, codes, float(vram_budget_mb), cpu_cores, background,
         float(oom_detect_ms), rows=rows, times=times, residency=residency,
         contention=contention, mixed=mixed)
    if inverse is not None:
        return times[0][inverse], times[1][inverse]
    return times


_DISTINCT_FROM = 32
"""`call_times` looks for repeated rows from this many rows on."""


def _never_on_cpu(np: Any, codes: Any, vram: Sequence[float], budget: float,
                  base_mb: float) -> Any:
    """Which calls of which rows never reach the CPU (without resident models): a
    ``gpu_queued`` call that fits the budget (it waits for the GPU), a ``gpu_now`` call that
    fits at launch (`_run`'s launch: VRAM granted in call order from the background's);
    only a ``gpu_now`` call that does not fit falls back."""
    m, n = codes.shape
    out = np.zeros((m, n), dtype=bool)
    capacity = budget - base_mb
    in_use = np.full(m, base_mb)
    for j in range(n):
        if vram[j] > capacity:
            continue
        fits = (codes[:, j] == 0) & (in_use + vram[j] <= budget + _EPS)
        np.add(in_use, vram[j], out=in_use, where=fits)
        out[:, j] = fits | (codes[:, j] == 1)
    return out


def _distinct_rows(
    np: Any, codes: Any, rows: dict[str, Any], groups: Any = None, never_cpu: Any = None,
) -> tuple[Any, Any]:
    """The first of each group of rows that simulate alike and every row's group, or
    (None, None) when all differ (or there are few rows). Rows simulate alike when their
    codes and row fields are the same bytes, a `cpu` call's GPU fields aside (never read:
    the call never reaches the GPU) — e.g. a contention fit's variants of a share of a tool
    that an executed placement ran on the CPU."""
    m, n = codes.shape
    if m < _DISTINCT_FROM:
        return None, None
    parts = [codes.astype(np.float64)]
    if groups is not None:  # rows of different contention models never simulate alike
        parts.append(groups.astype(np.float64)[:, None])
    on_cpu = codes == 2
    for f in ROW_FIELDS:
        if f in rows:
            part = np.array(np.asarray(rows[f], dtype=np.float64).reshape(m, n))
            if f in ("gpu_ms", "gpu_share"):
                part[on_cpu] = 0.0
            elif never_cpu is not None:  # cpu_ms, cpu_threads: never read off the CPU
                part[never_cpu] = 0.0
            parts.append(part)
    key = np.ascontiguousarray(np.concatenate(parts, axis=1))
    _, first, inverse = np.unique(key.view(np.dtype((np.void, key.itemsize * key.shape[1])))
                                  .reshape(m), return_index=True, return_inverse=True)
    if len(first) == m:
        return None, None
    return first, inverse.reshape(-1)


def _run(
    np: Any,
    params: Sequence[ToolParams],
    codes: Any,
    budget: float,
    cpu_cores: int,
    bg: BackgroundLoad,
    oom_ms: float,
    *,
    rows: dict[str, Any] | None = None,
    times: tuple[Any, Any] | None = None,
    residency: Residency | None = None,
    contention: Contention | None = None,
    mixed: _Mixed | None = None,
) -> Any:
    """The lockstep simulation; mirrors `testbed._Simulation` operation by operation.
    ``mixed``: each row's own contention physics (`call_times`)."""
    m, n = codes.shape
    if n == 0:
        return np.zeros(m)
    # the ufuncs' reductions themselves: ``a.any()`` and ``a.min(axis=1)`` reach the same ones
    # through a Python wrapper, paid on every step of the loop below
    any_of, all_of = np.logical_or.reduce, np.logical_and.reduce
    min_of, sum_of = np.minimum.reduce, np.add.reduce
    given = rows or {}
    physics: str = "processor_sharing" if contention is None else contention.physics
    if mixed is not None:
        physics = "mixed"
    if physics == "bandwidth":
        assert contention is not None
        if len(contention.mem_bound) != n:
            raise ValueError(f"contention.mem_bound: {len(contention.mem_bound)} values for "
                             f"{n} calls")
        mem_bound = np.array(contention.mem_bound, dtype=np.float64)
    overhead = 0.0 if contention is None else float(contention.slice_overhead)
    fifo = physics == "idle_queue" or (mixed is not None and mixed.has("idle_queue"))

    def per_row(field: str, dtype: Any) -> Any:
        if field in given:
            return np.asarray(given[field], dtype=dtype).reshape(m, n)
        column = np.array([getattr(p, field) for p in params], dtype=dtype)
        return np.broadcast_to(column, (m, n))

    transfer = [p.transfer_ms for p in params]
    vram = [p.vram_mb for p in params]
    base_mb = float(bg.vram_mb)
    base_share = float(bg.gpu_share)
    capacity = budget - base_mb
    free_cores = max(1, cpu_cores - bg.cpu_threads)
    rm = None if residency is None or residency.idle else _row_models(
        np, codes, residency, budget, base_mb, vram)

    st = _State(np, m, n, base_mb if rm is None else rm.base_mb, base_share)
    st.cpu_ms = per_row("cpu_ms", np.float64)
    st.gpu_ms = per_row("gpu_ms", np.float64)
    st.share = per_row("gpu_share", np.float64)
    st.threads = per_row("cpu_threads", np.int64)
    if rm is not None:
        st.extend(gpu_load=rm.gpu_load, dev_gpu=np.zeros((m, n), dtype=bool),
                  host_end=np.full((m, max(1, len(rm.cpu_load))), np.inf))
        capacity_rows = budget - rm.base_mb
    if fifo:  # when each call began computing (idle_queue serves the earliest)
        st.extend(gpu_since=np.full((m, n), np.inf))
    if mixed is not None:  # each row's physics, dropped with its row
        st.extend(m_physics=mixed.physics, m_overhead=mixed.overhead,
                  m_mem_bound=mixed.mem_bound)
    transfer_row = np.array(transfer, dtype=np.float64)

    def start_gpu(rows: Any, j: int) -> None:
        # masked writes (``where=``) into column views: the same values as ``a[rows, j] =``,
        # without gathering the rows first
        np.copyto(st.start[:, j], st.now, where=rows)
        if rm is not None:
            st.dev_gpu[rows, j] = True
            pre = np.maximum(0.0, st.gpu_load[rows, j] - st.now[rows])
            wait = pre > 0
            if wait.any():
                nxt = _TRANSFER if transfer[j] > 0 else _GPU
                first = transfer[j] * 1.0 if transfer[j] > 0 else st.gpu_ms[rows, j] * 1.0
                st.phase[rows, j] = np.where(wait, _LOAD, nxt)
                st.remaining[rows, j] = np.where(wait, pre, first)
                if fifo and nxt == _GPU:
                    st.gpu_since[rows, j] = np.where(wait, np.inf, st.now[rows])
                return
        if transfer[j] > 0:
            np.copyto(st.phase[:, j], _TRANSFER, where=rows)
            np.copyto(st.remaining[:, j], transfer[j] * 1.0, where=rows)
        else:
            np.copyto(st.phase[:, j], _GPU, where=rows)
            np.copyto(st.remaining[:, j], st.gpu_ms[:, j], where=rows)
            if fifo:
                np.copyto(st.gpu_since[:, j], st.now, where=rows)

    def start_cpu(rows: Any, j: int) -> None:
        k = -1 if rm is None else rm.model_index[j]
        if k < 0 or rm is None or rm.cpu_load[k] <= 0:
            st.phase[rows, j] = _CPU
            st.remaining[rows, j] = st.cpu_ms[rows, j] * 1.0
            return
        now = st.now[rows]
        end = st.host_end[rows, k]
        end = np.where(np.isinf(end), now + rm.cpu_load[k], end)
        st.host_end[rows, k] = end
        pre = np.maximum(0.0, end - now)
        wait = pre > 0
        st.phase[rows, j] = np.where(wait, _LOAD, _CPU)
        st.remaining[rows, j] = np.where(wait, pre, st.cpu_ms[rows, j] * 1.0)

    def grant(rows: Any, j: int) -> None:
        np.add(st.in_use, vram[j], out=st.in_use, where=rows)
        np.add(st.used_share, st.share[:, j], out=st.used_share, where=rows)
        st.active_n += rows

    def launch() -> None:
        """The launch without resident models, a whole array at a time: only the VRAM and
        share granted to `gpu_now` calls accumulate in call order (the same additions as
        `grant`); each call's phase and remaining work as `start_cpu`/`start_gpu` set them
        (every start time is 0, as ``st.start`` begins)."""
        now_calls = codes == 0
        fits = np.zeros((m, n), dtype=bool)
        for j in range(n):
            if vram[j] > capacity:
                continue
            fits[:, j] = now_calls[:, j] & (st.in_use + vram[j] <= budget + _EPS)
            np.add(st.in_use, vram[j], out=st.in_use, where=fits[:, j])
            np.add(st.used_share, st.share[:, j], out=st.used_share, where=fits[:, j])
        st.active_n += fits.sum(axis=1)
        moves = transfer_row > 0
        np.copyto(st.phase, np.where(moves, _TRANSFER, _GPU).astype(np.int8), where=fits)
        np.copyto(st.remaining, np.where(moves[None, :], transfer_row[None, :], st.gpu_ms),
                  where=fits)
        if fifo:
            np.copyto(st.gpu_since, 0.0, where=fits & ~moves[None, :])
        oom = now_calls & ~fits
        np.copyto(st.phase, _OOM, where=oom)
        np.copyto(st.ready_at, 0.0 + oom_ms, where=oom)
        queued = codes == 1
        to_cpu = (codes == 2) | (queued & (np.array(vram) > capacity)[None, :])
        np.copyto(st.phase, _CPU, where=to_cpu)
        np.copyto(st.remaining, st.cpu_ms, where=to_cpu)
        np.copyto(st.phase, _QUEUED, where=queued & ~to_cpu)

    # launch: cpu and gpu_now in call order, then gpu_queued in call order, then admission
    if rm is None:
        launch()
    for j in range(n if rm is not None else 0):
        col = codes[:, j]
        is_cpu = col == 2
        start_cpu(is_cpu, j)
        now_rows = col == 0
        if rm is not None:
            fits = (now_rows & ~rm.no_room[:, j] & ~(vram[j] > capacity_rows)
                    & (st.in_use + vram[j] <= budget + _EPS))
        elif vram[j] > capacity:
            fits = np.zeros(m, dtype=bool)
        else:
            fits = now_rows & (st.in_use + vram[j] <= budget + _EPS)
        grant(fits, j)
        start_gpu(fits, j)
        oom = now_rows & ~fits
        st.phase[oom, j] = _OOM
        st.ready_at[oom, j] = 0.0 + oom_ms
    for j in range(n if rm is not None else 0):
        queued = codes[:, j] == 1
        if rm is not None:
            over = queued & (rm.no_room[:, j] | (vram[j] > capacity_rows))
            start_cpu(over, j)
            st.phase[queued & ~over, j] = _QUEUED
        elif vram[j] > capacity:
            start_cpu(queued, j)
        else:
            st.phase[queued, j] = _QUEUED

    vram_arr = np.array(vram, dtype=np.float64)
    # calls enter the queue only at launch and leave it by admission, head first: once none
    # is left, admission has nothing to do, and a row's head is the next of its queued calls
    # in call order (``qorder``, from ``qpos``)
    queued_at_launch = st.phase == _QUEUED
    st.extend(queued_n=queued_at_launch.sum(axis=1),  # per row
              qorder=(~queued_at_launch).argsort(axis=1, kind="stable"),
              qpos=np.zeros(m, dtype=np.int64))
    queue = [int(st.queued_n.sum())]

    transfer_on = transfer_row > 0

    def admit_rows(idx: Any, head: Any) -> None:
        """`grant` and `start_gpu` of call ``head[k]`` in row ``idx[k]`` (one call a row, no
        resident models): the same operations on those elements."""
        st.in_use[idx] = st.in_use[idx] + vram_arr[head]
        st.used_share[idx] = st.used_share[idx] + st.share[idx, head]
        st.active_n[idx] += 1
        st.start[idx, head] = st.now[idx]
        moves = transfer_on[head]
        st.phase[idx, head] = np.where(moves, _TRANSFER, _GPU)
        st.remaining[idx, head] = np.where(moves, transfer_row[head], st.gpu_ms[idx, head])
        if fifo:
            st.gpu_since[idx, head] = np.where(moves, st.gpu_since[idx, head], st.now[idx])

    def release(rows: Any, cols: Any) -> None:
        """Give back what call ``cols[k]`` held in row ``rows[k]`` (pairs in row order,
        calls in call order within a row): per row, call by call in call order, the VRAM
        and share subtracted and, once no call computes, reset to the ledger's base."""
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        if first.all():  # most often one call a row: one level, the same operations
            _release_level(rows, cols)
            return
        rank = np.arange(len(rows))
        rank -= np.maximum.accumulate(np.where(first, rank, 0))
        for level in range(int(rank.max()) + 1):  # a row's first call, then its second...
            at = rank == level
            _release_level(rows[at], cols[at])

    def _release_level(r: Any, c: Any) -> None:
        """`release` of one call in each of the rows ``r`` (distinct rows)."""
        st.in_use[r] = st.in_use[r] - vram_arr[c]
        st.used_share[r] = st.used_share[r] - st.share[r, c]
        st.active_n[r] -= 1
        idle = r[st.active_n[r] == 0]
        st.in_use[idle] = base_mb if rm is None else st.base[idle]
        st.used_share[idle] = base_share

    def admit(rows: Any = None) -> None:
        """Admit queued calls in the rows ``rows`` (None: all), head of each row's queue
        first, while they fit; a row that released nothing since its last admission would
        admit nothing now either. Works on those rows' indices only."""
        if not queue[0]:
            return
        waits = st.queued_n > 0
        idx = np.flatnonzero(waits if rows is None else rows & waits)
        while len(idx):
            head = st.qorder[idx, st.qpos[idx]]
            ok = (
                (st.in_use[idx] + vram_arr[head] <= budget + _EPS)
                & ((st.active_n[idx] == 0)
                   | (st.used_share[idx] + st.share[idx, head] <= 1.0 + _EPS))
            )
            if not any_of(ok, axis=None):
                return
            idx, head = idx[ok], head[ok]
            queue[0] -= len(idx)
            st.queued_n[idx] -= 1
            st.qpos[idx] += 1
            if rm is None:  # one call a row: grant and start them all at once
                admit_rows(idx, head)
            else:
                for j in np.unique(head):
                    admitted = np.zeros(len(st.rows), dtype=bool)
                    admitted[idx[head == j]] = True
                    grant(admitted, int(j))
                    start_gpu(admitted, int(j))
            idx = idx[st.queued_n[idx] > 0]

    admit()
    out = np.zeros(m)
    inf = np.inf
    # per phase: does it progress (transfer, GPU, CPU, and a load), is it alive (or OOM)
    progresses = np.zeros(7, dtype=bool)
    progresses[[_TRANSFER, _GPU, _CPU]] = True
    progresses[_LOAD] = rm is not None
    alive = progresses.copy()
    alive[_OOM] = True
    ended = True  # a row can only end where a call just ended
    while True:
        phase = st.phase
        active = progresses[phase]
        waiting = phase == _OOM
        live = any_of(alive[phase], axis=1) if ended else None
        if live is not None and not all_of(live, axis=None):
            dead = ~live
            out[st.rows[dead]] = st.end[dead].max(axis=1)
            if times is not None:
                times[0][st.rows[dead]] = st.start[dead]
                times[1][st.rows[dead]] = st.end[dead]
            if not any_of(live, axis=None):
                break
            st.keep(live)
            phase, active, waiting = st.phase, active[live], waiting[live]
        now = st.now
        in_gpu = phase == _GPU
        on_cpu = phase == _CPU
        head = None
        if physics == "processor_sharing":
            # a running sum in call order (as the event simulation adds): bit-identical
            demand_sum = np.where(in_gpu, st.share, 0.0).cumsum(axis=1)[:, -1]
            demand = base_share + demand_sum
        elif physics == "time_slicing":
            k = in_gpu.sum(axis=1)
            demand = base_share + k.astype(np.float64)
            demand = np.where(k >= 2, demand * (1.0 + overhead), demand)
        elif physics == "bandwidth":
            k1 = (in_gpu.sum(axis=1) - 1).astype(np.float64)
            inflated = st.share * (1.0 + mem_bound[None, :] * k1[:, None])
            demand = base_share + np.where(in_gpu, inflated, 0.0).cumsum(axis=1)[:, -1]
        elif physics == "idle_queue":  # the call computing longest, ties in call order
            head = np.argmin(np.where(in_gpu, st.gpu_since, inf), axis=1)
            any_gpu = in_gpu.any(axis=1)
            demand = np.where(any_gpu, base_share + st.share[np.arange(len(head)), head],
                              base_share)
        else:  # mixed: each row's own physics, the same operations as above, row by row
            assert mixed is not None
            demand, head = _mixed_demand(np, mixed, st, in_gpu, base_share)
        # 1/D where D > 1, else exactly 1.0 (1.0 / 1.0); the cores alike
        gpu_rate = 1.0 / np.maximum(demand, 1.0)
        used_threads = sum_of(np.where(on_cpu, st.threads, 0), axis=1)
        cpu_rate = free_cores / np.maximum(used_threads, free_cores)
        rate = np.where(in_gpu, gpu_rate[:, None], np.where(on_cpu, cpu_rate[:, None], 1.0))
        remaining = st.remaining
        if head is None:
            dt = min_of(np.where(active, remaining / rate, inf), axis=1)
        else:
            stalled = in_gpu & (np.arange(n)[None, :] != head[:, None])
            if physics == "mixed":  # only idle-queue rows stall
                stalled &= (st.m_physics == _IDLE_QUEUE)[:, None]
            rate = np.where(stalled, 0.0, rate)
            dt = np.where(active & ~stalled, remaining / np.where(stalled, 1.0, rate),
                          inf).min(axis=1)
        any_waiting = bool(any_of(waiting, axis=None))
        if any_waiting:
            dt = np.minimum(dt, np.where(waiting, st.ready_at - now[:, None], inf).min(axis=1))
        dt = np.maximum(dt, 0.0)
        now = now + dt
        st.now = now
        remaining = np.where(active, remaining - rate * dt[:, None], remaining)
        if any_waiting:
            ready = waiting & (st.ready_at <= (now + _EPS)[:, None])
            if rm is None or not rm.host_loads:
                phase[ready] = _CPU
                remaining = np.where(ready, st.cpu_ms, remaining)
            else:  # in call order: the first call to start a host load sets when it ends
                st.remaining = remaining
                for j in np.flatnonzero(ready.any(axis=0)):
                    start_cpu(ready[:, j], int(j))
                remaining = st.remaining
        finished = active & ~(remaining > (_EPS * np.maximum(1.0, now))[:, None])
        to_gpu = finished & (phase == _TRANSFER)
        phase[to_gpu] = _GPU
        remaining = np.where(to_gpu, st.gpu_ms, remaining)
        if fifo:
            st.gpu_since = np.where(to_gpu, now[:, None], st.gpu_since)
        loaded = None
        if rm is not None:
            loaded = finished & (phase == _LOAD)
            if any_of(loaded, axis=None):
                to_transfer = loaded & st.dev_gpu & (transfer_row > 0)[None, :]
                to_compute = loaded & st.dev_gpu & ~to_transfer
                to_cpu = loaded & ~st.dev_gpu
                phase[to_transfer] = _TRANSFER
                phase[to_compute] = _GPU
                phase[to_cpu] = _CPU
                remaining = np.where(to_transfer, transfer_row[None, :] * 1.0, remaining)
                remaining = np.where(to_compute, st.gpu_ms, remaining)
                if fifo:
                    st.gpu_since = np.where(to_compute, now[:, None], st.gpu_since)
                remaining = np.where(to_cpu, st.cpu_ms, remaining)
        st.remaining = remaining
        done = finished & ~to_gpu
        if loaded is not None:
            done &= ~loaded
        ended = bool(any_of(done, axis=None))
        if ended:
            released = done & in_gpu
            phase[done] = _DONE
            st.end = np.where(done, now[:, None], st.end)
            rel_rows, rel_cols = released.nonzero()  # row by row, calls in call order
            if len(rel_rows):
                release(rel_rows, rel_cols)
                # admission only changes where GPU calls released what they held
                if queue[0]:
                    admit(any_of(released, axis=1))
    return out


_PROCESSOR_SHARING, _TIME_SLICING, _BANDWIDTH, _IDLE_QUEUE = range(4)
_PHYSICS_CODE = {"processor_sharing": _PROCESSOR_SHARING, "time_slicing": _TIME_SLICING,
                 "bandwidth": _BANDWIDTH, "idle_queue": _IDLE_QUEUE}


class _Mixed:
    """Per-row contention physics (`call_times` ``models``/``groups``): each row's physics
    code, time-slicing overhead and per-call ``mem_bound``."""

    def __init__(self, np: Any, models: list[Contention | None], groups: Any, n: int) -> None:
        codes, overheads, bounds = [], [], []
        for c in models:
            physics = "processor_sharing" if c is None else c.physics
            if physics not in _PHYSICS_CODE:
                raise ValueError(f"unknown physics {physics!r}")
            if physics == "bandwidth":
                assert c is not None
                if len(c.mem_bound) != n:
                    raise ValueError(f"contention.mem_bound: {len(c.mem_bound)} values for "
                                     f"{n} calls")
            codes.append(_PHYSICS_CODE[physics])
            overheads.append(0.0 if c is None else float(c.slice_overhead))
            bounds.append(list(c.mem_bound) if physics == "bandwidth" and c is not None
                          else [0.0] * n)
        self.physics = np.array(codes, dtype=np.int64)[groups]
        self.overhead = np.array(overheads, dtype=np.float64)[groups]
        self.mem_bound = np.array(bounds, dtype=np.float64).reshape(-1, n)[groups]

    def has(self, physics: str) -> bool:
        return bool((self.physics == _PHYSICS_CODE[physics]).any())

    def take(self, rows: Any) -> _Mixed:
        out = object.__new__(_Mixed)
        out.physics, out.overhead = self.physics[rows], self.overhead[rows]
        out.mem_bound = self.mem_bound[rows]
        return out


def _mixed_demand(
    np: Any, mixed: _Mixed, st: _State, in_gpu: Any, base_share: float
) -> tuple[Any, Any]:
    """The GPU demand of each row under its own physics (the operations `_run` does for
    one physics, each row's value taken from its physics), and the idle-queue head (None
    when no row runs idle_queue)."""
    kind = st.m_physics
    present = set(np.unique(kind).tolist())
    demand = base_share + np.cumsum(np.where(in_gpu, st.share, 0.0), axis=1)[:, -1]
    if _TIME_SLICING in present:
        k = in_gpu.sum(axis=1)
        sliced = base_share + k.astype(np.float64)
        sliced = np.where(k >= 2, sliced * (1.0 + st.m_overhead), sliced)
        demand = np.where(kind == _TIME_SLICING, sliced, demand)
    if _BANDWIDTH in present:
        k1 = (in_gpu.sum(axis=1) - 1).astype(np.float64)
        inflated = st.share * (1.0 + st.m_mem_bound * k1[:, None])
        wide = base_share + np.cumsum(np.where(in_gpu, inflated, 0.0), axis=1)[:, -1]
        demand = np.where(kind == _BANDWIDTH, wide, demand)
    head = None
    if _IDLE_QUEUE in present:
        head = np.argmin(np.where(in_gpu, st.gpu_since, np.inf), axis=1)
        any_gpu = in_gpu.any(axis=1)
        queue = np.where(any_gpu, base_share + st.share[np.arange(len(head)), head],
                         base_share)
        demand = np.where(kind == _IDLE_QUEUE, queue, demand)
    return demand, head


class _State:
    """Per-mapping simulation state, one row per mapping still running."""

    def __init__(self, np: Any, m: int, n: int, base_mb: Any, base_share: float) -> None:
        self._extra: tuple[str, ...] = ()
        self.rows = np.arange(m)
        self.phase = np.full((m, n), _DONE, dtype=np.int8)
        self.remaining = np.zeros((m, n))
        self.ready_at = np.zeros((m, n))
        self.end = np.zeros((m, n))
        self.start = np.zeros((m, n))
        self.cpu_ms: Any = None
        self.gpu_ms: Any = None
        self.share: Any = None
        self.threads: Any = None
        self.in_use = np.array(np.broadcast_to(base_mb, (m,)), dtype=np.float64)
        self.base = self.in_use.copy()
        self.used_share = np.full(m, base_share)
        self.active_n = np.zeros(m, dtype=np.int64)
        self.now = np.zeros(m)
        self.gpu_load: Any = None
        self.dev_gpu: Any = None
        self.host_end: Any = None
        self.gpu_since: Any = None
        self.m_physics: Any = None  # each row's physics (mixed batches)
        self.m_overhead: Any = None
        self.m_mem_bound: Any = None
        self.queued_n: Any = None
        self.qorder: Any = None  # each row's queued calls in call order, then the others
        self.qpos: Any = None  # how many of them were admitted

    def extend(self, **fields: Any) -> None:
        """Per-row fields of the resident-model rule, dropped with their rows too."""
        for name, value in fields.items():
            setattr(self, name, value)
        self._extra += tuple(fields)

    def keep(self, live: Any) -> None:
        """Drop the rows whose simulation has ended."""
        for name in ("rows", "phase", "remaining", "ready_at", "end", "start", "in_use",
                     "used_share", "active_n", "now", "cpu_ms", "gpu_ms", "share", "threads",
                     "base", *self._extra):
            setattr(self, name, getattr(self, name)[live])


def mapping_codes(mappings: Sequence[Sequence[DeviceOption]], n: int) -> Any:
    """Option codes of explicit mappings, one row each (shape (len(mappings), n))."""
    np = _numpy()
    if not mappings:
        return np.empty((0, n), dtype=np.int8)
    return np.array([[_CODE[o] for o in m] for m in mappings], dtype=np.int8).reshape(-1, n)


def all_mappings(choices: Sequence[Sequence[DeviceOption]]) -> list[tuple[DeviceOption, ...]]:
    """The mappings `product_codes` encodes, as option tuples (for tests and small batches)."""
    return list(itertools.product(*choices))
