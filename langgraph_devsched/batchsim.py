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
from typing import Any, Protocol

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption


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

_EPS = 1e-9
_CHUNK = 1 << 16
# phases, as in testbed._Simulation
_QUEUED, _TRANSFER, _GPU, _CPU, _OOM, _DONE = range(6)
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
    machine = (float(vram_budget_mb), cpu_cores, background, float(oom_detect_ms))
    if not prune:
        return _chunked(np, params, codes, machine)
    lb = lower_bounds(params, codes, vram_budget_mb=vram_budget_mb, cpu_cores=cpu_cores,
                      background=background, oom_detect_ms=oom_detect_ms)
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
    for lo in range(0, codes.shape[0], _CHUNK):
        out[lo : lo + _CHUNK] = _run(np, params, codes[lo : lo + _CHUNK], *machine)
    return out


def lower_bounds(
    params: Sequence[ToolParams],
    codes: Any,
    *,
    vram_budget_mb: float,
    cpu_cores: int,
    background: BackgroundLoad,
    oom_detect_ms: float,
) -> Any:
    """An admissible lower bound on each row's makespan (slightly loosened for float safety).

    The largest of: each call's solo time on the device it ends up on (a `gpu_now` that does
    not fit at launch pays the OOM detection, then the CPU); the CPU work in thread-ms over the
    free cores; the GPU work weighted by share (the GPU completes at most ``1 - bg/D`` of
    share-weighted work per ms, D the largest possible demand) after the shortest transfer.
    """
    np = _numpy()
    m = codes.shape[0]
    budget = float(vram_budget_mb)
    capacity = budget - float(background.vram_mb)
    free_cores = max(1, cpu_cores - background.cpu_threads)
    in_use = np.full(m, float(background.vram_mb))
    solo = np.zeros(m)
    cpu_work = np.zeros(m)
    gpu_work = np.zeros(m)
    gpu_demand = np.zeros(m)
    first_transfer = np.full(m, np.inf)
    for j, p in enumerate(params):
        col = codes[:, j]
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
) -> tuple[Any, Any]:
    """Start and end time (ms from the step's start) of every call of every row of
    ``codes``, as two (m, n) arrays; ``rows`` may give any of `ROW_FIELDS` per row and call
    (an (m, n) array), overriding ``params`` there. Bit-identical to
    `SimulatedTestbed.simulate`'s ``start_ms``/``end_ms`` for the same parameters."""
    np = _numpy()
    codes = np.asarray(codes, dtype=np.int8)
    if codes.ndim != 2 or codes.shape[1] != len(params):
        raise ValueError(f"codes must have shape (m, {len(params)}), got {codes.shape}")
    unknown = set(rows or {}) - set(ROW_FIELDS)
    if unknown:
        raise ValueError(f"unknown row fields {sorted(unknown)}; valid: {', '.join(ROW_FIELDS)}")
    times = (np.zeros(codes.shape), np.zeros(codes.shape))
    _run(np, params, codes, float(vram_budget_mb), cpu_cores, background,
         float(oom_detect_ms), rows=rows, times=times)
    return times


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
) -> Any:
    """The lockstep simulation; mirrors `testbed._Simulation` operation by operation."""
    m, n = codes.shape
    if n == 0:
        return np.zeros(m)
    given = rows or {}

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

    st = _State(np, m, n, base_mb, base_share)
    st.cpu_ms = per_row("cpu_ms", np.float64)
    st.gpu_ms = per_row("gpu_ms", np.float64)
    st.share = per_row("gpu_share", np.float64)
    st.threads = per_row("cpu_threads", np.int64)

    def start_gpu(rows: Any, j: int) -> None:
        st.start[rows, j] = st.now[rows]
        if transfer[j] > 0:
            st.phase[rows, j] = _TRANSFER
            st.remaining[rows, j] = transfer[j] * 1.0
        else:
            st.phase[rows, j] = _GPU
            st.remaining[rows, j] = st.gpu_ms[rows, j] * 1.0

    def grant(rows: Any, j: int) -> None:
        st.in_use[rows] = st.in_use[rows] + vram[j]
        st.used_share[rows] = st.used_share[rows] + st.share[rows, j]
        st.active_n[rows] += 1

    # launch: cpu and gpu_now in call order, then gpu_queued in call order, then admission
    for j in range(n):
        col = codes[:, j]
        is_cpu = col == 2
        st.phase[is_cpu, j] = _CPU
        st.remaining[is_cpu, j] = st.cpu_ms[is_cpu, j] * 1.0
        now_rows = col == 0
        if vram[j] > capacity:
            fits = np.zeros(m, dtype=bool)
        else:
            fits = now_rows & (st.in_use + vram[j] <= budget + _EPS)
        grant(fits, j)
        start_gpu(fits, j)
        oom = now_rows & ~fits
        st.phase[oom, j] = _OOM
        st.ready_at[oom, j] = 0.0 + oom_ms
    for j in range(n):
        queued = codes[:, j] == 1
        if vram[j] > capacity:
            st.phase[queued, j] = _CPU
            st.remaining[queued, j] = st.cpu_ms[queued, j] * 1.0
        else:
            st.phase[queued, j] = _QUEUED

    vram_arr = np.array(vram, dtype=np.float64)

    def admit() -> None:
        rows_left = np.ones(len(st.rows), dtype=bool)
        while True:
            queued = st.phase == _QUEUED
            has = queued.any(axis=1) & rows_left
            if not has.any():
                return
            head = np.argmax(queued, axis=1)
            ok = (
                has
                & (st.in_use + vram_arr[head] <= budget + _EPS)
                & ((st.active_n == 0)
                   | (st.used_share + st.share[np.arange(len(head)), head] <= 1.0 + _EPS))
            )
            if not ok.any():
                return
            rows_left = ok
            for j in np.unique(head[ok]):
                rows = ok & (head == j)
                grant(rows, int(j))
                start_gpu(rows, int(j))

    admit()
    out = np.zeros(m)
    inf = np.inf
    while True:
        phase = st.phase
        active = (phase == _TRANSFER) | (phase == _GPU) | (phase == _CPU)
        waiting = phase == _OOM
        live = (active | waiting).any(axis=1)
        if not live.all():
            dead = ~live
            out[st.rows[dead]] = st.end[dead].max(axis=1)
            if times is not None:
                times[0][st.rows[dead]] = st.start[dead]
                times[1][st.rows[dead]] = st.end[dead]
            if not live.any():
                break
            st.keep(live)
            phase, active, waiting = st.phase, active[live], waiting[live]
        now = st.now
        in_gpu = phase == _GPU
        on_cpu = phase == _CPU
        # a running sum in call order (as the event simulation adds): bit-identical
        demand_sum = np.cumsum(np.where(in_gpu, st.share, 0.0), axis=1)[:, -1]
        demand = base_share + demand_sum
        over = demand > 1.0
        gpu_rate = np.where(over, 1.0 / np.where(over, demand, 1.0), 1.0)
        used_threads = (np.where(on_cpu, st.threads, 0)).sum(axis=1)
        cpu_rate = np.where(
            used_threads > free_cores, free_cores / np.maximum(used_threads, 1), 1.0
        )
        rate = np.where(in_gpu, gpu_rate[:, None], np.where(on_cpu, cpu_rate[:, None], 1.0))
        remaining = st.remaining
        dt = np.where(active, remaining / rate, inf).min(axis=1)
        if waiting.any():
            dt = np.minimum(dt, np.where(waiting, st.ready_at - now[:, None], inf).min(axis=1))
        dt = np.maximum(dt, 0.0)
        now = now + dt
        st.now = now
        remaining = np.where(active, remaining - rate * dt[:, None], remaining)
        if waiting.any():
            start_cpu = waiting & (st.ready_at <= (now + _EPS)[:, None])
            phase[start_cpu] = _CPU
            remaining = np.where(start_cpu, st.cpu_ms * 1.0, remaining)
        finished = active & ~(remaining > (_EPS * np.maximum(1.0, now))[:, None])
        to_gpu = finished & (phase == _TRANSFER)
        phase[to_gpu] = _GPU
        remaining = np.where(to_gpu, st.gpu_ms * 1.0, remaining)
        st.remaining = remaining
        done = finished & ~to_gpu
        if done.any():
            released = done & in_gpu
            phase[done] = _DONE
            st.end = np.where(done, now[:, None], st.end)
            for j in np.flatnonzero(released.any(axis=0)):
                rows = released[:, j]
                st.in_use[rows] = st.in_use[rows] - vram[j]
                st.used_share[rows] = st.used_share[rows] - st.share[rows, j]
                st.active_n[rows] -= 1
                idle = rows & (st.active_n == 0)
                st.in_use[idle] = base_mb
                st.used_share[idle] = base_share
            admit()
    return out


class _State:
    """Per-mapping simulation state, one row per mapping still running."""

    def __init__(self, np: Any, m: int, n: int, base_mb: float, base_share: float) -> None:
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
        self.in_use = np.full(m, base_mb)
        self.used_share = np.full(m, base_share)
        self.active_n = np.zeros(m, dtype=np.int64)
        self.now = np.zeros(m)

    def keep(self, live: Any) -> None:
        """Drop the rows whose simulation has ended."""
        for name in ("rows", "phase", "remaining", "ready_at", "end", "start", "in_use",
                     "used_share", "active_n", "now", "cpu_ms", "gpu_ms", "share", "threads"):
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
