"""The classical baselines: HEFT, StarPU-style dmda, UCB1 over complete mappings."""

from __future__ import annotations

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.dmda import DmdaScheduler
from langgraph_devsched.schedulers.classic.heft import HeftScheduler
from langgraph_devsched.schedulers.classic.ucb import UcbScheduler
from langgraph_devsched.schedulers.registry import make_scheduler, scheduler_names
from langgraph_devsched.telemetry import DeviceState

IDLE = SchedulerView(DeviceState(True, "gpu", 24000, 0, 0, 4))
BUSY = SchedulerView(DeviceState(True, "gpu", 24000, 16000, 0.9, 4))


def spec(cpu: float, gpu: float, transfer: float = 0.0, **kw: object) -> ToolDeviceSpec:
    return ToolDeviceSpec(profile=SoloProfile(cpu_ms=cpu, gpu_ms=gpu, transfer_ms=transfer), **kw)


def test_registered() -> None:
    assert {"heft", "dmda", "ucb", "oracle"} <= set(scheduler_names())
    assert make_scheduler("heft").name == "heft"


def test_heft_earliest_finish_time_with_a_serial_gpu() -> None:
    # four equal calls, GPU 50 ms, CPU 120 ms, 4 cores: GPU finishes at 50, 100; the third
    # would finish at 150 > 120 on a core, so it and the fourth go to the CPU.
    batch = Batch.of([(f"c{i}", "ocr", spec(120, 50)) for i in range(4)])
    d = HeftScheduler().decide(batch, IDLE)
    assert dict(d.mapping) == {"c0": "gpu_now", "c1": "gpu_queued", "c2": "cpu", "c3": "cpu"}
    assert dict(d.predicted_ms) == {"c0": 50.0, "c1": 100.0, "c2": 120.0, "c3": 120.0}


def test_heft_is_blind_to_background_load_and_respects_hints() -> None:
    bm25 = ToolDeviceSpec(gpu_capable=False)
    batch = Batch.of([("a", "embed", spec(150, 120)), ("b", "bm25", bm25)])
    heft = HeftScheduler()
    assert heft.decide(batch, IDLE).mapping == heft.decide(batch, BUSY).mapping
    assert HeftScheduler().decide(batch, IDLE).mapping["b"] == "cpu"


def _record(batch: Batch, mapping: dict[str, str], run_ms: dict[str, float]) -> StepRecord:
    calls = tuple(
        CallRecord(c.call_id, c.tool, mapping[c.call_id],  # type: ignore[arg-type]
                   "cpu" if mapping[c.call_id] == "cpu" else "cuda:0", None,
                   0.0, run_ms[c.call_id], 0.0, 0)
        for c in batch.calls
    )
    return StepRecord(calls=calls, makespan_ms=max(run_ms.values()))


def test_dmda_uses_declared_profile_until_calibrated_then_history() -> None:
    batch = Batch.of([("a", "embed", spec(150, 120, transfer=4))])
    dmda = DmdaScheduler(calibration_samples=3)
    assert dmda.decide(batch, IDLE).mapping["a"] == "gpu_now"
    for k in range(3):
        # the GPU is much slower than declared (a background load): 200 ms measured
        decision = dmda.decide(batch, IDLE)
        dmda.observe(batch, decision, _record(batch, {"a": "gpu_now"}, {"a": 204.0}))
        expected = "gpu_now" if k < 2 else "cpu"
        assert dmda.decide(batch, IDLE).mapping["a"] == expected
    assert dmda.expected_length("embed", "gpu", 120, 4) == 200.0


def test_dmda_queues_behind_the_gpu_and_spreads_over_cpu_workers() -> None:
    batch = Batch.of([(f"c{i}", "ocr", spec(120, 50)) for i in range(5)])
    d = DmdaScheduler().decide(batch, IDLE)  # 4 cores: 3 CPU workers + the GPU's driver
    assert list(d.mapping.values()) == ["gpu_now", "gpu_queued", "cpu", "cpu", "cpu"]


def test_ucb_tries_every_arm_first_in_prior_order_then_exploits() -> None:
    batch = Batch.of([("a", "fft", spec(30, 42, transfer=40))])
    ucb = UcbScheduler()
    truth = {"gpu_now": 42.0, "gpu_queued": 42.0, "cpu": 30.0}
    tried = []
    for _ in range(3):
        d = ucb.decide(batch, IDLE)
        assert d.probe
        tried.append(d.mapping["a"])
        ucb.observe(batch, d, _record(batch, dict(d.mapping), {"a": truth[d.mapping["a"]]}))
    assert tried == ["cpu", "gpu_now", "gpu_queued"]  # declared CPU cost is lowest
    picks = []
    for _ in range(30):
        d = ucb.decide(batch, IDLE)
        picks.append(d.mapping["a"])
        ucb.observe(batch, d, _record(batch, dict(d.mapping), {"a": truth[d.mapping["a"]]}))
    assert picks.count("cpu") > picks.count("gpu_now") + picks.count("gpu_queued")


def test_ucb_keeps_one_bandit_per_batch_shape() -> None:
    ucb = UcbScheduler()
    one = Batch.of([("a", "x", spec(10, 5))])
    two = Batch.of([("a", "x", spec(10, 5)), ("b", "y", ToolDeviceSpec(gpu_capable=False))])
    ucb.decide(one, IDLE)
    d = ucb.decide(two, IDLE)
    assert d.mapping["b"] == "cpu"
    assert "of 3)" in d.reason  # x has 3 options, y only the CPU


def test_ucb_builds_arms_incrementally_for_large_batches() -> None:
    # 20 calls have 3^20 (3.5 billion) mappings: never enumerated, at most max_arms tried
    batch = Batch.of([(f"c{i}", f"t{i % 7}", spec(100 + 10 * i, 30 + i)) for i in range(20)])
    ucb = UcbScheduler(max_arms=5)
    seen = []
    for _ in range(12):
        d = ucb.decide(batch, IDLE)
        seen.append(tuple(d.options_for(batch)))
        ucb.observe(batch, d, _record(batch, dict(d.mapping),
                                      {c: 10.0 for c in batch.call_ids}))
    assert len(set(seen[:5])) == 5  # five distinct arms first ...
    assert set(seen[5:]) <= set(seen[:5])  # ... then UCB1 among them only
    sizes = ucb.state_sizes()
    assert sizes["max_arms_tried"] == 5 and sizes["max_arms_built"] <= 6
    assert "of 3486784401)" in UcbScheduler().decide(batch, IDLE).reason


def test_ucb_keeps_the_most_recent_shapes_only() -> None:
    ucb = UcbScheduler(max_shapes=2)
    for k in range(5):
        ucb.decide(Batch.of([("a", f"tool{k}", spec(10, 5))]), IDLE)
    assert ucb.state_sizes()["bandits"] == 2


def test_dmda_history_is_a_bounded_window() -> None:
    batch = Batch.of([("a", "ocr", spec(300, 50))])
    dmda = DmdaScheduler(history_window=3, calibration_samples=1)
    for ms in (100.0, 200.0, 30.0, 40.0, 50.0):
        d = dmda.decide(batch, IDLE)
        dmda.observe(batch, d, _record(batch, {"a": "cpu"}, {"a": ms}))
    assert dmda.expected_length("ocr", "cpu", 300.0, 0.0) == 40.0  # mean of 30, 40, 50
    assert dmda.state_sizes() == {"pairs": 1, "max_samples": 3}
