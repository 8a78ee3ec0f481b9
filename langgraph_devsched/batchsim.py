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
from collections.abc import Sequence
from typing import Any

from langgraph_devsched._sim.lockstep import EPS, BackgroundLoad, Lockstep, ToolParams
from langgraph_devsched._sim.physics import (
    PHYSICS,
    Contention,
    Mixed,
    Physics,
    check_physics,
)
from langgraph_devsched._sim.residency_rows import (
    MAX_PLANS,
    GpuPlan,
    Residency,
    plan_gpu,
    row_models,
)
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption

__all__ = [
    "MAX_PLANS", "PHYSICS", "ROW_FIELDS", "BackgroundLoad", "Contention", "GpuPlan", "Physics",
    "Residency", "StepEnd", "ToolParams", "all_mappings", "call_times", "check_physics",
    "evicted_models", "lower_bounds", "makespans", "mapping_codes", "plan_gpu",
    "product_codes", "require_numpy", "step_ends",
]

# rows simulated at once: a run holds a dozen or more (m, n) float arrays and their temporaries,
# so memory stays bounded (65,536 rows of 16 calls: about 8 MB an array) whatever the mappings
_CHUNK = 1 << 16


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
    rm = row_models(np, codes, residency, vram_budget_mb, background.vram_mb,
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
    rm = row_models(np, codes, residency, vram_budget_mb, background.vram_mb, vram)
    budget = float(vram_budget_mb)
    capacity = budget - rm.base_mb
    in_use = np.array(rm.base_mb, dtype=np.float64)
    on_cpu = codes == 2
    for j in range(n):  # the launch, as `_run` does it: gpu_now in call order, then queued
        now = codes[:, j] == 0
        fits = now & ~rm.no_room[:, j] & ~(vram[j] > capacity) & (in_use + vram[j] <= budget + EPS)
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


# the rows with the lowest bounds are simulated first: the best of their makespans (the
# incumbent) prunes every row whose bound exceeds it
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
    rm = None if residency is None or residency.idle else row_models(
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
            fits = (col == 0) & ~blocked & (in_use + p.vram_mb <= budget + EPS)
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
                fits = (col == 0) & (in_use + p.vram_mb <= budget + EPS)
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
    # loosened: the simulation's own rounding may end a row a hair below the exact bound, and
    # a bound above a true makespan would prune the optimum
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
        mixed = Mixed(np, list(models), groups, len(params))
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
        fits = (codes[:, j] == 0) & (in_use + vram[j] <= budget + EPS)
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
    mixed: Mixed | None = None,
) -> Any:
    """Each row's makespan by the lockstep simulation (`_sim.lockstep.Lockstep`), which
    mirrors `_sim.events.Simulation` operation by operation; ``times`` receives each call's
    start and end. ``mixed``: each row's own contention physics (`call_times`). Every
    batched simulation goes through this one name (tests count them here)."""
    if codes.shape[1] == 0:
        return np.zeros(codes.shape[0])
    return Lockstep(np, params, codes, budget, cpu_cores, bg, oom_ms, rows=rows,
                    residency=residency, contention=contention, mixed=mixed).run(times)



def mapping_codes(mappings: Sequence[Sequence[DeviceOption]], n: int) -> Any:
    """Option codes of explicit mappings, one row each (shape (len(mappings), n))."""
    np = _numpy()
    if not mappings:
        return np.empty((0, n), dtype=np.int8)
    return np.array([[_CODE[o] for o in m] for m in mappings], dtype=np.int8).reshape(-1, n)


def all_mappings(choices: Sequence[Sequence[DeviceOption]]) -> list[tuple[DeviceOption, ...]]:
    """The mappings `product_codes` encodes, as option tuples (for tests and small batches)."""
    return list(itertools.product(*choices))
