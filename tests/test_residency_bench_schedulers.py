"""Schedulers that see resident models: load costs, warm twins, learnt load times (issue 14)."""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import load_scenarios
from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.classic.dmda import DmdaScheduler
from langgraph_devsched.schedulers.classic.heft import HeftScheduler
from langgraph_devsched.schedulers.policy.model import estimate_params, twin
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
from tests.builtin_bench import UNBUDGETED

pytest.importorskip("numpy")

OCR = ToolDeviceSpec(vram_mb=600, weights_mb=3500, load_ms=LoadProfile(gpu_ms=3000, cpu_ms=400),
                     profile=SoloProfile(cpu_ms=700, gpu_ms=250))


def device(*warm: WarmModel) -> DeviceState:
    return DeviceState(True, "gpu", 16000, 0, 0, 8, resident=warm)


@pytest.mark.parametrize("scheduler", [HeftScheduler(), DmdaScheduler()])
def test_a_cold_model_costs_its_load_and_a_warm_one_does_not(scheduler: object) -> None:
    batch = Batch.of([("a", "ocr", OCR)])
    cold = scheduler.decide(batch, SchedulerView(device()))  # type: ignore[attr-defined]
    assert cold.mapping == {"a": "cpu"}  # 3000 + 250 on the GPU vs 400 + 700 on the CPU
    warm = scheduler.decide(  # type: ignore[attr-defined]
        batch, SchedulerView(device(WarmModel("ocr", 3500))))
    assert warm.mapping == {"a": "gpu_now"}


def test_one_load_serves_every_call_of_the_batch() -> None:
    calls = [(f"c{i}", "ocr", OCR) for i in range(3)]
    # HEFT: the first GPU call pays 3000, the next ones 250 each (serial GPU) < 1100 on a core
    mapping = HeftScheduler().decide(Batch.of(calls), SchedulerView(device())).mapping
    assert "cpu" in mapping.values()


def test_dmda_history_leaves_the_load_out() -> None:
    bed = SimulatedTestbed({"ocr": ToolParams(cpu_ms=700, gpu_ms=250, vram_mb=600,
                                              weights_mb=3500, load_gpu_ms=3000)},
                           vram_budget_mb=16000)
    dmda = DmdaScheduler(calibration_samples=1)
    batch = Batch.of([("a", "ocr", OCR)])
    record = bed.run_step([("a", "ocr", "gpu_now")])
    assert record.calls[0].load_ms == 3000
    dmda.observe(batch, Decision({"a": "gpu_now"}), record)
    assert dmda.expected_length("ocr", "gpu", 250, 0) == 250


def test_the_twin_starts_from_the_resident_models() -> None:
    from langgraph_devsched.monitor.observations import Observations

    params = {"ocr": estimate_params("ocr", OCR, Observations(step=0), bg_share=0.0)}
    assert (params["ocr"].weights_mb, params["ocr"].load_gpu_ms) == (3500, 3000)
    cold = twin(params, device(), oom_ms=20).makespan([("a", "ocr", "gpu_now")])
    warm_state = device(WarmModel("ocr", 3500), WarmModel("llm", 9000))  # llm: no tool's
    hot = twin(params, warm_state, oom_ms=20)
    assert (cold, hot.makespan([("a", "ocr", "gpu_now")])) == (3250, 250)
    assert [w.model for w in hot.device_state().resident] == ["ocr", "llm"]
    # 9000 + 3500 of 16000 held: 4000 more weights evict the least recently used (ocr)
    big = {"vlm": ToolParams(cpu_ms=900, gpu_ms=100, weights_mb=4000, load_gpu_ms=10)}
    step = twin(big | params, warm_state, oom_ms=20).run_step([("b", "vlm", "gpu_now")])
    assert step.calls[0].evicted == ("ocr",)


def test_the_monitor_keeps_load_times_apart_and_the_twin_learns_them() -> None:
    bed = SimulatedTestbed({"ocr": ToolParams(cpu_ms=700, gpu_ms=250, vram_mb=600,
                                              weights_mb=3500, load_gpu_ms=3000)},
                           vram_budget_mb=16000)
    mon = RuntimeMonitor()
    undeclared = ToolDeviceSpec(vram_mb=600, weights_mb=3500)
    batch = Batch.of([("a", "ocr", undeclared)])
    for _ in range(2):
        mon.record_step(batch, Decision({"a": "gpu_now"}), bed.run_step(
            [("a", "ocr", "gpu_now")]), bed.device_state())
    obs = mon.snapshot(batch, tools={"ocr"})
    assert obs.load_seen_ms == {"ocr|gpu": 3000}
    assert obs.estimate("ocr", "gpu_now").run_ms == 250  # the cold start's load left out
    params = estimate_params("ocr", undeclared, obs, bg_share=0.0)
    assert (params.gpu_ms, params.load_gpu_ms, params.load_cpu_ms) == (250, 3000, 0)


COLD_BURST_MISS = 1.02
"""The unbudgeted monitor ends residency_cold_burst at 1.018x its reference (d7c8ce5 too):
with the default 100 ms budget it was optimal only where the budget cut its search short in
a lucky place, so this test's verdict used to depend on the machine's speed."""


def test_the_monitor_policy_is_optimal_on_every_residency_builtin_but_cold_burst() -> None:
    for s in load_scenarios():
        if s.category != "residency":
            continue
        r = run_scenario(s, ["monitor", "oracle"], scheduler_options=UNBUDGETED)
        monitor = r.results["monitor"]
        if s.name == "residency_cold_burst":
            ratio = monitor.round_makespans_ms[-1] / r.reference_makespans_ms[-1]
            assert ratio <= COLD_BURST_MISS, (s.name, ratio)
        else:
            assert monitor.optimal, s.name
