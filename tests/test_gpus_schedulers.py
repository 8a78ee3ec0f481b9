"""Schedulers choose the GPU on a machine with several: HEFT and dmda by earliest finish over
every GPU (speed, warm weights, per-device history), the oracle exactly over (2k+1)^n; all_gpu
and static name no GPU (the default rule). One GPU: their one-GPU code, unchanged."""

from __future__ import annotations

import itertools

import pytest

from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.dmda import DmdaScheduler
from langgraph_devsched.schedulers.classic.heft import HeftScheduler
from langgraph_devsched.schedulers.classic.oracle import OracleScheduler
from langgraph_devsched.schedulers.classic.static import AllGpuScheduler, StaticHintScheduler
from langgraph_devsched.schedulers.classic.ucb import UcbScheduler
from langgraph_devsched.telemetry import DeviceState, GpuDevice
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

OCR = ToolDeviceSpec(profile=SoloProfile(cpu_ms=900, gpu_ms=100, transfer_ms=10))
LLM = ToolDeviceSpec(profile=SoloProfile(cpu_ms=9000, gpu_ms=200), weights_mb=16000,
                     load_ms=LoadProfile(gpu_ms=3000))


def view(*devices: GpuDevice) -> SchedulerView:
    return SchedulerView(DeviceState(True, "g", devices[0].budget_mb, 0, 0, 8, gpus=devices))


@pytest.mark.parametrize("scheduler", [HeftScheduler(), DmdaScheduler()])
def test_list_schedulers_send_a_model_to_its_warm_gpu_and_work_to_the_fast_one(
        scheduler: HeftScheduler | DmdaScheduler) -> None:
    warm = GpuDevice(0, "a", 24000, resident=(WarmModel("llm", 16000),))
    fast = GpuDevice(1, "b", 24000, speed=2.0)
    d = scheduler.decide(Batch.of([("l", "llm", LLM), ("o", "ocr", OCR)]), view(warm, fast))
    assert dict(d.gpus) == {"l": 0, "o": 1}  # l: cold on 1 (3 s load); o: twice as fast on 1
    assert dict(d.mapping) == {"l": "gpu_now", "o": "gpu_now"}  # first on each GPU: now
    assert d.predicted_ms["o"] == pytest.approx(90 / 2 + 10)


@pytest.mark.parametrize("scheduler", [HeftScheduler(), DmdaScheduler()])
def test_list_schedulers_keep_a_pinned_call_on_its_gpus(
        scheduler: HeftScheduler | DmdaScheduler) -> None:
    pinned = OCR.model_copy(update={"gpus": (0,)})
    d = scheduler.decide(Batch.of([("o", "ocr", pinned)]),
                         view(GpuDevice(0, "a", 24000), GpuDevice(1, "b", 24000, speed=4.0)))
    assert dict(d.gpus) == {"o": 0}


def test_dmda_calibrates_each_gpu_on_its_own_history() -> None:
    dmda = DmdaScheduler(calibration_samples=1)
    two = view(GpuDevice(0, "a", 24000), GpuDevice(1, "b", 24000))
    batch = Batch.of([("o", "ocr", OCR)])
    first = dmda.decide(batch, two)
    assert dict(first.gpus) == {"o": 0}  # alike: the lowest index
    slow = CallRecord("o", "ocr", "gpu_now", "cuda:0", None, 0.0, 510.0, 0.0, 0)
    dmda.observe(batch, first, StepRecord((slow,), 510.0))  # GPU 0 took 500 ms of compute
    assert dict(dmda.decide(batch, two).gpus) == {"o": 1}  # GPU 1: the declared 90 ms


@pytest.mark.parametrize("scheduler", [AllGpuScheduler(), StaticHintScheduler()])
def test_all_gpu_and_static_name_no_gpu(scheduler: AllGpuScheduler) -> None:
    d = scheduler.decide(Batch.of([("o", "ocr", OCR)]),
                         view(GpuDevice(0, "a", 24000), GpuDevice(1, "b", 24000)))
    assert dict(d.gpus) == {}  # the default rule places them


PARAMS = {"ocr": ToolParams(cpu_ms=400, gpu_ms=100, vram_mb=2000),
          "llm": ToolParams(cpu_ms=5000, gpu_ms=200, vram_mb=1000, weights_mb=16000,
                            load_gpu_ms=3000)}


def test_the_oracle_over_gpus_is_the_exact_optimum_and_symmetry_loses_nothing() -> None:
    bed = SimulatedTestbed(PARAMS, gpus=[GpuSpec(vram_mb=24000, resident=("llm",)),
                                         GpuSpec(vram_mb=24000), GpuSpec(vram_mb=24000)])
    spec = ToolDeviceSpec()
    batch = Batch.of([("l", "llm", spec), ("a", "ocr", spec), ("b", "ocr", spec)])
    d = OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state()))
    assert "best of 185 placements (343 before symmetry)" in d.reason
    options = [("cpu", None)] + [(o, g) for o in ("gpu_queued", "gpu_now") for g in range(3)]
    every = min(bed.makespan([(c, t, o) for (c, t), (o, _) in zip(
        [("l", "llm"), ("a", "ocr"), ("b", "ocr")], combo, strict=True)],
        gpus={c: g for c, (_, g) in zip("lab", combo, strict=True) if g is not None})
        for combo in itertools.product(options, repeat=3))
    assert d.predicted_ms["makespan"] == every == 200.0  # each ocr alone on an empty GPU
    assert d.gpus["l"] == 0  # the LLM stays where it is warm
    got = bed.makespan([(c.call_id, c.tool, d.mapping[c.call_id]) for c in batch.calls],
                       gpus=dict(d.gpus))
    assert got == every


def test_the_oracle_over_gpus_refuses_past_its_bound() -> None:
    bed = SimulatedTestbed(PARAMS, gpus=[GpuSpec(vram_mb=24000, speed=1.0 + g / 10)
                                         for g in range(4)])  # none alike: no symmetry
    batch = Batch.of([(f"c{i}", "ocr", ToolDeviceSpec()) for i in range(5)])
    with pytest.raises(ValueError, match=r"59049 placements.*limit of 20000"):
        OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state()))


def test_ucb_arms_name_the_gpu_and_reach_the_oracles_placement_on_two_gpus() -> None:
    """2 GPUs: each call's choices are cpu and 2 options x 2 GPUs (5), an arm names the GPU
    of every GPU-placed call, and once every arm was pulled on the testbed (noise-free, the
    makespan from the same state each step) its best arm is the oracle's placement
    (``exploration=0``: UCB1 pulls its best mean arm once every arm was tried)."""
    bed = SimulatedTestbed(PARAMS, gpus=[GpuSpec(vram_mb=24000, resident=("llm",)),
                                         GpuSpec(vram_mb=24000)])
    spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=400, gpu_ms=100), vram_mb=2000)
    llm = ToolDeviceSpec(profile=SoloProfile(cpu_ms=5000, gpu_ms=200), vram_mb=1000,
                         weights_mb=16000, load_ms=LoadProfile(gpu_ms=3000))
    batch = Batch.of([("l", "llm", llm), ("a", "ocr", spec), ("b", "ocr", spec)])
    two = SchedulerView(bed.device_state())
    ucb = UcbScheduler(exploration=0.0)
    first = ucb.decide(batch, two)
    assert first.gpus["l"] == 0  # the static estimate: the LLM where it is warm
    assert set(first.gpus) == {c for c, o in first.mapping.items() if o != "cpu"}
    assert "untried arm (1 of 125)" in first.reason  # (2 x 2 + 1) ** 3 arms
    decision = first
    for _ in range(5 ** 3):
        calls = [(c.call_id, c.tool, decision.mapping[c.call_id]) for c in batch.calls]
        ucb.observe(batch, decision, bed.simulate(calls, gpus=dict(decision.gpus)))
        decision = ucb.decide(batch, two)
    best = OracleScheduler(testbed=bed).decide(batch, two)
    placed = [(c.call_id, c.tool, decision.mapping[c.call_id]) for c in batch.calls]
    assert not decision.probe
    assert bed.makespan(placed, gpus=dict(decision.gpus)) == best.predicted_ms["makespan"]


def test_ucb_on_one_gpu_names_no_gpu_and_keeps_its_arms() -> None:
    ucb = UcbScheduler()
    batch = Batch.of([("a", "ocr", OCR), ("b", "ocr", OCR)])
    d = ucb.decide(batch, view(GpuDevice(0, "a", 24000)))
    assert dict(d.gpus) == {} and "untried arm (1 of 9)" in d.reason
