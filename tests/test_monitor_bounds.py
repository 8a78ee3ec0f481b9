"""Bounded monitor state (issue 13): every table stays within its cap, eviction keeps the most
recent entries, loaded stats are trimmed the same way, and ``snapshot(tools=...)`` holds
exactly those tools."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor import MonitorLimits, MonitorSizes, RuntimeMonitor
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.telemetry import DeviceState

GPU = DeviceState(True, "sim", 8000.0, 0.0, 0.0, 8)
TOOLS = [f"t{i:02d}" for i in range(20)]
SMALL = {"max_tools": 8, "max_stats_per_tool": 3, "max_stats": 10, "max_shapes": 4,
         "max_outcomes_per_shape": 2, "max_outcomes": 6}


def record(
    mon: RuntimeMonitor, calls: list[tuple[str, DeviceOption]], *, probe: bool = False,
    run_ms: float = 10.0,
) -> Batch:
    """One step of ``calls`` (tool, option) run one after the other (no overlap)."""
    batch = Batch.of([(f"c{i}", t, ToolDeviceSpec()) for i, (t, _) in enumerate(calls)])
    recs = [
        CallRecord(f"c{i}", t, o, "cpu" if o == "cpu" else "cuda:0", None,
                   100.0 * i, 100.0 * i + run_ms, 0.0 if o == "cpu" else 100.0 + i, 0)
        for i, (t, o) in enumerate(calls)
    ]
    step = StepRecord(recs, makespan_ms=100.0 * len(calls), vram_peak_mb=0.0)
    mon.record_step(batch, Decision({f"c{i}": o for i, (_, o) in enumerate(calls)},
                                    probe=probe), step, GPU)
    return batch


def random_steps(mon: RuntimeMonitor, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        tools = rng.sample(TOOLS, rng.randint(1, 3))
        record(mon, [(t, rng.choice(DEVICE_OPTIONS)) for t in tools], probe=rng.random() < 0.3)


def within(sizes: MonitorSizes, limits: MonitorLimits) -> bool:
    return (sizes.tools <= limits.max_tools and sizes.vram_seen <= limits.max_tools
            and sizes.stats <= limits.max_stats
            and sizes.stats_per_tool <= limits.max_stats_per_tool
            and sizes.shapes <= limits.max_shapes
            and sizes.probe_budgets <= 2 * limits.max_shapes
            and sizes.outcomes <= limits.max_outcomes
            and sizes.outcomes_per_shape <= limits.max_outcomes_per_shape)


def test_every_table_stays_within_its_cap() -> None:
    mon = RuntimeMonitor(**SMALL)
    for seed in range(20):
        random_steps(mon, 25, seed)
        assert within(mon.sizes(), mon.limits), mon.sizes()
    sizes = mon.sizes()
    assert (sizes.tools, sizes.stats, sizes.shapes) == (8, 10, 4)  # the caps bind
    assert sizes.shapes <= sizes.outcomes <= 6
    assert len(mon.state.stats) == sizes.stats and len(mon.state.last) == sizes.shapes
    obs = mon.snapshot()
    assert len(obs.estimates) == sizes.stats and len(obs.outcomes) == sizes.outcomes
    assert len(obs.vram_seen_mb) <= SMALL["max_tools"]


def test_default_caps_hold_over_a_long_run() -> None:
    mon = RuntimeMonitor(max_shapes=50, max_outcomes=40)
    random_steps(mon, 3000)
    sizes = mon.sizes()
    assert within(sizes, mon.limits) and sizes.shapes == 50 and sizes.outcomes == 40
    assert MonitorLimits() == RuntimeMonitor().limits
    assert MonitorLimits().max_stats == 8192 and MonitorLimits().max_outcomes == 4096


def test_eviction_keeps_the_most_recent() -> None:
    mon = RuntimeMonitor(max_stats_per_tool=2, max_shapes=2, max_tools=2)
    for option in ("gpu_now", "gpu_queued", "cpu"):  # three keys of one tool: the first goes
        record(mon, [("ocr", option)])
    assert [e.option for e in mon.snapshot().estimates] == ["cpu", "gpu_queued"]
    record(mon, [("ocr", "cpu")])  # touched again: ocr is the most recent tool...
    record(mon, [("asr", "cpu")])
    record(mon, [("asr", "cpu"), ("ocr", "cpu")])  # ...a shape of two, then a third tool:
    record(mon, [("emb", "cpu")])
    obs = mon.snapshot()
    assert {e.tool for e in obs.estimates} == {"ocr", "emb"}  # asr was the least recent tool
    assert sorted(mon.state.tools) == ["emb", "ocr"]
    assert sorted(mon.state.last) == ["asr,ocr", "emb"]  # the two newest shapes
    assert {o.shape for o in obs.outcomes} == {("asr", "ocr"), ("emb",)}
    assert mon.state.last_shape == "emb" and [h.tools for h in obs.hints] == [("emb",)]


def test_an_evicted_shape_takes_its_probe_budget_and_outcomes_along() -> None:
    mon = RuntimeMonitor(max_shapes=1, probe_budget=2)
    record(mon, [("ocr", "gpu_now")], probe=True)
    assert mon.probes_left("ocr", "idle") == 1
    record(mon, [("asr", "cpu")], probe=True)
    assert mon.probes_left("ocr", "idle") == 2 and mon.probes_left("asr", "idle") == 1
    assert {o.shape for o in mon.snapshot().outcomes} == {("asr",)}


def test_loaded_stats_are_trimmed_to_the_caps(tmp_path: Path) -> None:
    big = RuntimeMonitor()
    random_steps(big, 400)
    path = tmp_path / "stats.json"
    big.save(path)
    assert len(json.loads(path.read_text())["stats"]) == len(big.state.stats)
    small = RuntimeMonitor.load(path, **SMALL)
    assert within(small.sizes(), small.limits) and small.sizes().stats == 10
    newest = list(big.state.stats)[-1]
    assert newest in small.state.stats  # the newest entries stay
    assert list(big.state.last)[-1] in small.state.last
    small.save(path)
    assert len(json.loads(path.read_text())["stats"]) <= SMALL["max_stats"]  # saved bounded
    random_steps(small, 50)
    assert within(small.sizes(), small.limits)


def test_snapshot_of_some_tools_holds_exactly_those() -> None:
    mon = RuntimeMonitor()
    random_steps(mon, 300)
    full = mon.snapshot()
    wanted = ["t03", "t07", "t11"]
    part = mon.snapshot(tools=wanted)
    assert {e.tool for e in part.estimates} == set(wanted)
    assert part.estimates == tuple(e for e in full.estimates if e.tool in wanted)
    assert set(part.vram_seen_mb) <= set(wanted) and part.vram_seen_mb
    assert part.outcomes == tuple(o for o in full.outcomes if set(o.shape) <= set(wanted))
    assert part.outcomes  # some shapes are made only of these tools
    assert mon.snapshot(tools=[]).estimates == () and mon.snapshot(tools=["nope"]).outcomes == ()
    assert mon.snapshot(tools="t03") == mon.snapshot(tools=["t03"])  # a name, not letters
    assert mon.snapshot(tools=TOOLS) == full


def test_hints_follow_the_batch_whatever_tools_are_asked_for() -> None:
    mon = RuntimeMonitor()
    random_steps(mon, 100)
    batch = record(mon, [("t01", "gpu_now"), ("t02", "cpu")])
    assert mon.snapshot(batch, tools=["t01", "t02"]).hints == mon.snapshot(batch).hints
    assert {t for h in mon.snapshot(batch).hints for t in h.tools} <= {"t01", "t02"}


def test_cached_estimates_still_age_every_step() -> None:
    times = [0.0]
    mon = RuntimeMonitor(stale_after_steps=3, clock=lambda: times[0])
    record(mon, [("ocr", "cpu")])
    first = mon.snapshot(tools=["ocr"]).estimate("ocr", "cpu")
    assert first is not None and first.steps_since == 0 and first.status == "measured"
    for _ in range(4):
        record(mon, [("asr", "cpu")])  # ocr itself unchanged
    times[0] = 7.0
    later = mon.snapshot(tools=["ocr"]).estimate("ocr", "cpu")
    assert later is not None and (later.steps_since, later.status, later.age_s) == (4, "stale",
                                                                                    7.0)


def test_noise_level_is_kept_exactly_under_eviction() -> None:
    mon = RuntimeMonitor(max_stats=4)
    rng = random.Random(1)
    for _ in range(300):
        tool = rng.choice(TOOLS[:6])
        record(mon, [(tool, "cpu")], run_ms=rng.uniform(5.0, 15.0))
    cvs = [ks.run.cv for ks in mon.state.stats.values() if ks.run.count >= 2]
    assert mon._tables.noise() == pytest.approx(sum(cvs) / len(cvs))


@pytest.mark.parametrize("arg", sorted(SMALL))
def test_caps_must_be_positive(arg: str) -> None:
    with pytest.raises(ValueError, match=f"{arg} must be a positive int"):
        RuntimeMonitor(**{arg: 0})
