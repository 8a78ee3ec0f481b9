"""Running averages, the outlier rule, load contexts and staleness of the runtime monitor."""

from __future__ import annotations

import math

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor import LoadContext, RunningStat, RuntimeMonitor
from langgraph_devsched.monitor.context import call_context, vram_bucket
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.telemetry import DeviceState

GPU = DeviceState(True, "sim", 8000.0, 0.0, 0.0, 8)


def feed(values: list[float]) -> RunningStat:
    stat = RunningStat()
    for i, x in enumerate(values):
        stat = stat.add(x, step=i)
    return stat


def test_running_mean_and_spread_are_exact() -> None:
    stat = feed([10.0, 20.0, 30.0, 40.0])
    assert stat.count == 4
    assert stat.mean == 25.0
    assert stat.variance == pytest.approx(500.0 / 3)
    assert stat.std == pytest.approx(math.sqrt(500.0 / 3))
    assert stat.last_step == 3


def test_unknown_is_visible() -> None:
    stat = RunningStat()
    assert not stat.known and stat.count == 0 and stat.std == 0.0


def test_one_slow_run_is_set_aside() -> None:
    stat = feed([100.0, 100.0, 100.0, 500.0])
    assert (stat.mean, stat.count, stat.outliers) == (100.0, 3, 1)
    stat = stat.add(101.0, step=9)  # back to normal: the pending outlier is forgotten
    assert stat.pending == () and stat.count == 4 and stat.mean == pytest.approx(100.25)


def test_outlier_rule_needs_min_samples() -> None:
    stat = feed([100.0, 500.0])
    assert stat.count == 2 and stat.mean == 300.0


def test_two_outliers_in_a_row_reset_the_estimate() -> None:
    stat = feed([100.0, 100.0, 100.0, 300.0, 310.0])
    assert (stat.mean, stat.count, stat.outliers) == (305.0, 2, 0)


def test_outliers_on_opposite_sides_do_not_reset() -> None:
    stat = feed([100.0, 100.0, 100.0, 300.0, 10.0])
    assert (stat.mean, stat.count, stat.outliers) == (100.0, 3, 2)


def test_noise_within_tolerance_is_averaged() -> None:
    stat = feed([100.0, 110.0, 90.0, 120.0])
    assert stat.count == 4 and stat.outliers == 0 and stat.mean == 105.0


def test_context_keys_round_trip_and_reject_garbage() -> None:
    ctx = LoadContext(gpu=1, cpu=2, vram="high", bg="busy")
    assert LoadContext.parse(ctx.key) == ctx
    with pytest.raises(ValueError, match="not a load context key"):
        LoadContext.parse("gpu1-high")
    assert vram_bucket(100, 1000) == "low"
    assert vram_bucket(500, 1000) == "mid"
    assert vram_bucket(900, 1000) == "high"


def step_of(*calls: CallRecord, peak: float = 0.0) -> StepRecord:
    return StepRecord(calls=calls, makespan_ms=max(c.end_ms for c in calls), vram_peak_mb=peak)


def test_call_context_counts_gpu_peers_and_overlapping_calls() -> None:
    a = CallRecord("a", "asr", "gpu_now", "cuda:0", None, 0.0, 50.0, 1000.0, 1)
    b = CallRecord("b", "emb", "gpu_now", "cuda:0", None, 0.0, 40.0, 1000.0, 1)
    c = CallRecord("c", "ocr", "cpu", "cpu", None, 0.0, 30.0, 0.0, 0)
    late = CallRecord("d", "tts", "cpu", "cpu", None, 60.0, 90.0, 0.0, 0)
    step = step_of(a, b, c, late, peak=5000.0)
    assert call_context(a, step, GPU) == LoadContext(gpu=1, cpu=1, vram="mid", bg="idle")
    assert call_context(c, step, GPU) == LoadContext(gpu=2, cpu=0, vram="mid", bg="idle")
    assert call_context(late, step, GPU) == LoadContext(gpu=0, cpu=0, vram="mid", bg="idle")
    busy = DeviceState(True, "sim", 8000.0, 2000.0, 0.5, 8)
    ctx = call_context(late, step, busy)
    assert (ctx.vram, ctx.bg) == ("high", "busy")


def test_monitor_keeps_per_context_averages_counts_and_staleness() -> None:
    times = [10.0, 20.0, 30.0]
    mon = RuntimeMonitor(clock=lambda: times.pop(0) if len(times) > 1 else times[0],
                         stale_after_steps=1)
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    for run in (30.0, 34.0):
        rec = CallRecord("c1", "ocr", "gpu_now", "cuda:0", None, 0.0, run, 500.0, 0)
        mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    obs = mon.snapshot()  # clock reads 30
    est = obs.estimate("ocr", "gpu_now")
    assert est is not None
    assert (est.run_ms, est.count, est.device) == (32.0, 2, "gpu")
    assert est.context == "gpu0-cpu0-low-idle"
    assert est.std_ms == pytest.approx(math.sqrt(8.0))
    assert est.age_s == 10.0 and est.steps_since == 0 and est.status == "measured"
    assert obs.vram_seen_mb == {"ocr": 500.0}
    other = Batch.of([("c9", "emb", ToolDeviceSpec())])
    for _ in range(2):
        rec = CallRecord("c9", "emb", "cpu", "cpu", None, 0.0, 5.0, 0.0, 0)
        mon.record_step(other, Decision({"c9": "cpu"}), step_of(rec), GPU)
    old = mon.snapshot().estimate("ocr", "gpu_now")
    assert old is not None and old.steps_since == 2 and old.status == "stale"


def test_noisy_status_and_fallback_counts() -> None:
    mon = RuntimeMonitor(noisy_cv=0.2)
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    for run in (100.0, 160.0):
        rec = CallRecord("c1", "ocr", "gpu_now", "cpu", "oom", 0.0, run, 0.0, 0)
        mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    est = mon.snapshot().estimate("ocr", "gpu_now")
    assert est is not None and est.status == "noisy" and est.fallbacks == 2 and est.device == "cpu"


def test_snapshot_is_json_serialisable() -> None:
    import json

    mon = RuntimeMonitor()
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    rec = CallRecord("c1", "ocr", "gpu_now", "cuda:0", None, 0.0, 30.0, 500.0, 0)
    mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    data = json.loads(json.dumps(mon.snapshot().model_dump(mode="json")))
    assert data["estimates"][0]["run_ms"] == 30.0
    assert data["device"]["vram_budget_mb"] == 8000.0
    assert data["outcomes"][0]["placement"] == [["ocr", "gpu_now"]]


def test_a_regime_change_bumps_the_epoch_and_flags_drift() -> None:
    mon = RuntimeMonitor()
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    for run in (30.0, 30.0, 30.0, 90.0):
        rec = CallRecord("c1", "ocr", "gpu_now", "cuda:0", None, 0.0, run, 500.0, 0)
        mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    obs = mon.snapshot()
    assert (obs.epoch, obs.drift) == (0, False)  # one slow run: set aside
    rec = CallRecord("c1", "ocr", "gpu_now", "cuda:0", None, 0.0, 92.0, 500.0, 0)
    mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    obs = mon.snapshot()
    assert (obs.epoch, obs.drift) == (1, True)
    assert obs.estimate("ocr", "gpu_now").run_ms == 91.0  # type: ignore[union-attr]
    mon.record_step(batch, Decision({"c1": "gpu_now"}), step_of(rec), GPU)
    assert (mon.snapshot().epoch, mon.snapshot().drift) == (1, False)
