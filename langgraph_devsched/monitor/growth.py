"""How the monitor's per-step cost and memory grow over a long run (a measurement, not a test).

A server with ``tools`` tools runs ``steps`` steps of 1-3 calls each, options drawn at random
(the widest spread of shapes and placements a monitor can see). Each step is timed from
`RuntimeMonitor.record_step` to the end of the next snapshot, ``snapshot(batch, tools=...)``
(``full=True``: ``snapshot(batch)``, everything), in CPU time of this process and in wall
time. On a shared, loaded machine both drift with the load, so a second figure is taken
side by side: a copy of the monitor as it was at step 2,000 and the monitor at the end take
the same 2,000 further steps, alternately, and their medians are compared. Run it with
``python -m langgraph_devsched.monitor.growth [steps] [--full]``.

>>> report = measure(steps=300, tools=6, seed=1)
>>> report.steps, report.sizes.tools
(300, 6)
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.bounds import MonitorSizes
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.monitor.state import MonitorState
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams


@dataclass(frozen=True)
class GrowthReport:
    steps: int
    early_ms: float
    """Median CPU time of a step over steps 1,000-2,000 (or the first half of a shorter run)."""
    late_ms: float
    """Median CPU time of a step over the last 1,000 steps (or the second half)."""
    early_wall_ms: float
    late_wall_ms: float
    side_early_ms: float
    """Side by side: median CPU time of a step of the monitor copied at step 2,000..."""
    side_late_ms: float
    """...and of the monitor at the end, over the same 2,000 further steps."""
    rss_start_mb: float
    rss_end_mb: float
    sizes: MonitorSizes

    @property
    def ratio(self) -> float:
        return self.late_ms / self.early_ms if self.early_ms > 0 else float("inf")

    @property
    def side_ratio(self) -> float:
        return self.side_late_ms / self.side_early_ms if self.side_early_ms > 0 else float("inf")

    def describe(self) -> str:
        return (f"{self.steps} steps: median CPU {self.early_ms:.3f} ms a step early, "
                f"{self.late_ms:.3f} ms late (ratio {self.ratio:.2f}); wall "
                f"{self.early_wall_ms:.3f} / {self.late_wall_ms:.3f} ms; side by side "
                f"{self.side_early_ms:.3f} / {self.side_late_ms:.3f} ms (ratio "
                f"{self.side_ratio:.2f}); RSS "
                f"{self.rss_start_mb:.1f} -> {self.rss_end_mb:.1f} MB "
                f"(+{self.rss_end_mb - self.rss_start_mb:.1f}); tables {self.sizes}")


def rss_mb() -> float:
    """This process's resident set size in MB now (Linux ``/proc``), else its peak from
    ``resource``; 0.0 when neither is available. The one copy: `devsched perf` uses it too."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        except ImportError:  # pragma: no cover - not on Windows
            return 0.0


def measure(
    steps: int = 50_000, tools: int = 30, seed: int = 0, full: bool = False
) -> GrowthReport:
    rng = random.Random(seed)
    names = [f"tool{i:02d}" for i in range(tools)]
    bed = SimulatedTestbed(
        {t: ToolParams(cpu_ms=rng.uniform(20, 200), gpu_ms=rng.uniform(5, 60),
                       vram_mb=rng.uniform(200, 3000)) for t in names},
        vram_budget_mb=8000, cpu_cores=4, noise=0.05, seed=seed,
    )
    specs = {t: ToolDeviceSpec() for t in names}

    def next_step(i: int) -> tuple[Batch, Decision, StepRecord, DeviceState, list[str]]:
        chosen = rng.sample(names, rng.randint(1, 3))
        calls = [(f"s{i}c{j}", t, rng.choice(DEVICE_OPTIONS)) for j, t in enumerate(chosen)]
        batch = Batch.of([(c, t, specs[t]) for c, t, _ in calls])
        decision = Decision({c: o for c, _, o in calls}, probe=rng.random() < 0.05)
        return batch, decision, bed.run_step(calls), bed.device_state(), chosen

    def timed(mon: RuntimeMonitor, step: tuple[Any, ...]) -> tuple[float, float]:
        batch, decision, record, state, chosen = step
        start, wall = time.process_time(), time.perf_counter()
        mon.record_step(batch, decision, record, state)
        if full:
            mon.snapshot(batch)
        else:
            mon.snapshot(batch, tools=chosen)
        return time.process_time() - start, time.perf_counter() - wall

    mon = RuntimeMonitor(telemetry=bed)
    early_json: str | None = None
    times: list[float] = []
    walls: list[float] = []
    gc.collect()
    rss_start = rss_mb()
    for i in range(steps):
        cpu, wall = timed(mon, next_step(i))
        times.append(cpu)
        walls.append(wall)
        if i == min(2000, steps // 2):  # kept as JSON (a few MB, counted in the RSS below)
            early_json = mon.state.model_dump_json()
    gc.collect()
    rss_end = rss_mb()
    early_copy = None
    if early_json is not None:
        early_copy = RuntimeMonitor(
            state=MonitorState.model_validate_json(early_json), telemetry=bed)
    side: tuple[list[float], list[float]] = ([], [])
    for i in range(min(2000, steps) if early_copy is not None else 0):
        step = next_step(steps + i)
        pair = (early_copy, mon) if i % 2 else (mon, early_copy)
        for m in pair:
            assert m is not None
            side[m is mon].append(timed(m, step)[0])
    early, late = (slice(1000, 2000), slice(-1000, None)) if steps >= 3000 else (
        slice(0, steps // 2), slice(steps // 2, None))
    return GrowthReport(
        steps=steps, early_ms=statistics.median(times[early]) * 1e3,
        late_ms=statistics.median(times[late]) * 1e3,
        early_wall_ms=statistics.median(walls[early]) * 1e3,
        late_wall_ms=statistics.median(walls[late]) * 1e3,
        side_early_ms=statistics.median(side[0]) * 1e3 if side[0] else 0.0,
        side_late_ms=statistics.median(side[1]) * 1e3 if side[1] else 0.0,
        rss_start_mb=rss_start, rss_end_mb=rss_end, sizes=mon.sizes(),
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    steps = int(next((a for a in args if a.isdigit()), "50000"))
    print(measure(steps=steps, full="--full" in args).describe())


if __name__ == "__main__":
    main()
