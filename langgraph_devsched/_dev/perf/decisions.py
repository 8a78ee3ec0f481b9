"""Decision time and memory of each scheduler, by batch size, for fresh and repeated shapes.

For each size n a batch of n calls over ``min(n, 30)`` generated tools runs on a
`SimulatedTestbed` (one 24 GB GPU, or ``gpus`` of them: `perf_gpus`):

* **fresh** — a new scheduler's first decision of the shape (after one untimed warm-up
  decision of another shape, so imports and caches do not count), ``samples`` times;
* **repeated** — one scheduler decides the same shape round after round, each decision
  executed on the testbed and observed; after ``warmup`` rounds, ``samples`` decisions are
  timed (a decision the scheduler reused counts as it is: that is the point);
* **memory** — the peak of what `tracemalloc` sees allocated during one fresh decision, in
  MB (a separate run: tracing slows everything down).

Times come from ``clock`` (seconds, injectable); a scheduler that cannot take a size (the
oracle beyond its limit) is reported with the reason instead.

>>> from langgraph_devsched._dev.perf.decisions import measure_decisions
>>> rows = measure_decisions(["heft"], sizes=[2], samples=2, warmup=1)
>>> sorted(rows[0])  # doctest: +NORMALIZE_WHITESPACE
['error', 'fresh_p50_ms', 'fresh_p95_ms', 'n', 'peak_mb', 'repeated_p50_ms',
 'repeated_p95_ms', 'reused', 'scheduler']
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

from langgraph_devsched._dev.perf.generate import generate_tools
from langgraph_devsched.bench.runner import build_scheduler, percentile
from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.schedulers.base import Batch, Scheduler, SchedulerView
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_TOOLS = 30


def declared(p: ToolParams) -> ToolDeviceSpec:
    """What a profiler would declare for ``p``: solo times and VRAM."""
    return ToolDeviceSpec(
        vram_mb=p.vram_mb,
        profile=SoloProfile(cpu_ms=p.cpu_ms, gpu_ms=p.gpu_ms + p.transfer_ms,
                            transfer_ms=p.transfer_ms),
    )


def perf_gpus(k: int) -> list[GpuSpec] | None:
    """The machine's GPUs: one 24 GB GPU (None: the one-GPU shorthand), or ``k`` of them,
    alternately 24 GB at speed 1 and 12 GB at speed 2."""
    if k <= 1:
        return None
    return [GpuSpec(vram_mb=24000 if i % 2 == 0 else 12000, speed=1.0 if i % 2 == 0 else 2.0,
                    name=f"perf{i}") for i in range(k)]


def workload(n: int, *, seed: int = 0, noise: float = 0.05,
             gpus: int = 1) -> tuple[SimulatedTestbed, Batch]:
    """A testbed (``gpus``: `perf_gpus`) and one batch of ``n`` calls over ``min(n, 30)``
    generated tools."""
    params = generate_tools(max(1, min(n, MAX_TOOLS)), seed=seed)
    several = perf_gpus(gpus)
    bed = SimulatedTestbed(params, vram_budget_mb=None if several else 24000, gpus=several,
                           cpu_cores=8, noise=noise, seed=seed)
    names = list(params)
    batch = Batch.of([(f"c{i}", names[i % len(names)], declared(params[names[i % len(names)]]))
                      for i in range(n)])
    return bed, batch


def _decide_ms(
    scheduler: Scheduler, batch: Batch, bed: SimulatedTestbed, clock: Callable[[], float]
) -> tuple[float, bool]:
    view = SchedulerView(bed.device_state())
    t0 = clock()
    decision = scheduler.decide(batch, view)
    spent = (clock() - t0) * 1000.0
    calls = list(zip(batch.call_ids, [c.tool for c in batch.calls],
                     decision.options_for(batch), strict=True))
    gpus = decision.gpus if bed.gpu_count > 1 else None
    scheduler.observe(batch, decision, bed.run_step(calls, gpus=gpus))
    return spent, bool(getattr(decision, "reused", False))


def measure_one(
    name: str, n: int, *, samples: int = 5, warmup: int = 30, seed: int = 0,
    noise: float = 0.05, clock: Callable[[], float] = time.perf_counter, gpus: int = 1,
) -> dict[str, Any]:
    """One scheduler at one size: fresh and repeated percentiles, peak MB, reuse count."""
    row: dict[str, Any] = {"scheduler": name, "n": n, "error": None}
    try:
        warm_bed, warm_batch = workload(1, seed=seed + 1, noise=noise, gpus=gpus)
        _decide_ms(build_scheduler(name, testbed=warm_bed), warm_batch, warm_bed, clock)
        fresh = []
        for _ in range(samples):
            bed, batch = workload(n, seed=seed, noise=noise, gpus=gpus)
            fresh.append(_decide_ms(build_scheduler(name, testbed=bed), batch, bed, clock)[0])
        bed, batch = workload(n, seed=seed, noise=noise, gpus=gpus)
        tracemalloc.start()
        try:
            scheduler = build_scheduler(name, testbed=bed)
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            scheduler.decide(batch, SchedulerView(bed.device_state()))
            peak = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        finally:
            tracemalloc.stop()
        bed, batch = workload(n, seed=seed, noise=noise, gpus=gpus)
        scheduler = build_scheduler(name, testbed=bed)
        for _ in range(warmup):
            _decide_ms(scheduler, batch, bed, clock)
        repeated, reused = [], 0
        for _ in range(samples):
            ms, was_reused = _decide_ms(scheduler, batch, bed, clock)
            repeated.append(ms)
            reused += was_reused
    except ValueError as exc:  # e.g. the oracle over its size limit
        row["error"] = str(exc).split("\n")[0][:200]
        return row
    row.update(
        fresh_p50_ms=round(percentile(fresh, 50), 4),
        fresh_p95_ms=round(percentile(fresh, 95), 4),
        repeated_p50_ms=round(percentile(repeated, 50), 4),
        repeated_p95_ms=round(percentile(repeated, 95), 4),
        peak_mb=round(peak, 3),
        reused=reused,
    )
    return row


def measure_decisions(
    schedulers: Sequence[str], *, sizes: Sequence[int] = SIZES, samples: int = 5,
    warmup: int = 30, seed: int = 0, noise: float = 0.05,
    clock: Callable[[], float] = time.perf_counter,
    on_row: Callable[[dict[str, Any]], None] | None = None, gpus: int = 1,
) -> list[dict[str, Any]]:
    """`measure_one` for every scheduler and size."""
    rows = []
    for name in schedulers:
        for n in sizes:
            row = measure_one(name, n, samples=samples, warmup=warmup, seed=seed, noise=noise,
                              clock=clock, gpus=gpus)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows
