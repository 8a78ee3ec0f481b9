"""The monitor policy (the default scheduler) on several GPUs: optimal on the four built-ins
where the GPU decides; it names the GPU of every GPU-placed call from a twin of every GPU
(`schedulers/policy/gpu_placement.py`), reuses it with the decision, learns shares where the calls
ran and tries once a placement that tells an unknown share (`schedulers/policy/gpu_fit.py`), pools
samples of GPUs of different speeds, and on one GPU names none (the path it always took)."""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import builtin_by_name, load_scenario
from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.policy.gpu_fit import PlacedRuns
from langgraph_devsched.schedulers.policy.gpu_placement import gpus_twin, max_evals, place
from langgraph_devsched.schedulers.registry import make_scheduler
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

UNBUDGETED = {"monitor": {"max_decision_ms": None}}  # no wall-clock cut: speed-independent

TOOLS = {
    "llm": ToolParams(cpu_ms=60000, gpu_ms=900, vram_mb=2000, gpu_share=1.0, weights_mb=16000,
                      load_gpu_ms=8000, load_cpu_ms=7000),
    "ocr": ToolParams(cpu_ms=900, gpu_ms=60, transfer_ms=5, vram_mb=3000, gpu_share=0.6),
}


def spec(name: str) -> ToolDeviceSpec:
    p = TOOLS[name]
    return ToolDeviceSpec(vram_mb=p.vram_mb, weights_mb=p.weights_mb, model=p.model,
                          profile=SoloProfile(cpu_ms=p.cpu_ms, gpu_ms=p.gpu_ms + p.transfer_ms,
                                              transfer_ms=p.transfer_ms))


@pytest.mark.parametrize("name", ["gpus_embed_beside_large_model", "gpus_fast_80gb_slow_24gb",
                                  "gpus_llm_server_two_24gb", "gpus_visual_suite_4x24gb"])
def test_the_monitor_finds_the_optimum_where_the_gpu_decides(name: str) -> None:
    scenario = load_scenario(builtin_by_name(name)[0])
    result = run_scenario(scenario, ["monitor"], decision_cost="none",
                          scheduler_options=UNBUDGETED)
    assert result.results["monitor"].optimal


def test_every_gpu_call_is_named_a_gpu_and_the_reused_decision_keeps_it() -> None:
    bed = SimulatedTestbed(TOOLS, gpus=[GpuSpec(vram_mb=24000),
                                        GpuSpec(vram_mb=24000, resident=("llm",))], seed=1)
    batch = Batch.of([("a", "llm", spec("llm")), ("b", "ocr", spec("ocr")),
                      ("c", "ocr", spec("ocr"))])
    policy = make_scheduler("monitor", max_decision_ms=None)
    decisions: list[Decision] = []
    for _ in range(8):
        d = policy.decide(batch, SchedulerView(bed.device_state()))
        decisions.append(d)
        calls = list(zip(batch.call_ids, ["llm", "ocr", "ocr"], d.options_for(batch),
                         strict=True))
        policy.observe(batch, d, bed.run_step(calls, gpus=dict(d.gpus)))
    first = decisions[0]
    on_gpu = {c for c, o in first.mapping.items() if o != "cpu"}
    assert set(first.gpus) == on_gpu and first.gpus["a"] == 1  # the model is warm on GPU 1
    assert "GPUs" in first.reason
    reused = [d for d in decisions if d.reused]
    assert reused and all(d.gpus == decisions[decisions.index(d) - 1].gpus for d in reused)


def test_on_one_gpu_the_monitor_names_no_gpu() -> None:
    bed = SimulatedTestbed(TOOLS, vram_budget_mb=24000)
    batch = Batch.of([("a", "ocr", spec("ocr")), ("b", "ocr", spec("ocr"))])
    d = make_scheduler("monitor").decide(batch, SchedulerView(bed.device_state()))
    assert d.gpus == {} and "GPUs" not in d.reason


def test_the_placement_search_is_bounded_and_never_worse_than_its_start() -> None:
    bed = SimulatedTestbed(TOOLS, gpus=[GpuSpec(vram_mb=24000)] * 4)
    twin = gpus_twin(TOOLS, bed.device_state(), oom_ms=20.0)
    n = 12
    ids, tools = [f"c{i}" for i in range(n)], ["ocr"] * n
    spots = [[("cpu", None)] + [(o, g) for o in ("gpu_queued", "gpu_now") for g in range(4)]] * n
    start = tuple(("gpu_queued", 0) for _ in range(n))
    done = place(twin, ids, tools, spots, [start])
    assert done.evals <= max_evals(n) == 24
    assert done.span_ms <= twin.makespan(list(zip(ids, tools, ["gpu_queued"] * n,
                                                  strict=True)), gpus=dict.fromkeys(ids, 0))


def test_a_sample_on_a_faster_gpu_counts_as_on_a_gpu_of_speed_one() -> None:
    params = {"ocr": ToolParams(cpu_ms=900, gpu_ms=100, transfer_ms=10, vram_mb=1000)}
    bed = SimulatedTestbed(params, gpus=[GpuSpec(vram_mb=8000), GpuSpec(vram_mb=8000, speed=2)])
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec(profile=SoloProfile(
        cpu_ms=900, gpu_ms=110, transfer_ms=10)))])
    mon = RuntimeMonitor()
    record = bed.run_step([("c1", "ocr", "gpu_now")], gpus={"c1": 1})
    assert record.calls[0].run_ms == 60.0  # 10 ms copy + 100 ms / 2
    mon.record_step(batch, Decision({"c1": "gpu_now"}, gpus={"c1": 1}), record,
                    bed.device_state())
    assert mon.snapshot().estimate("ocr", "gpu_now").run_ms == 110.0


def test_runs_are_kept_per_gpu_placement_and_bounded() -> None:
    bed = SimulatedTestbed(TOOLS, gpus=[GpuSpec(vram_mb=24000), GpuSpec(vram_mb=24000)])
    runs = PlacedRuns(max_shapes=2)
    calls = [("a", "ocr", "gpu_now"), ("b", "ocr", "gpu_now")]
    runs.add(bed.run_step(calls, gpus={"a": 0, "b": 0}))  # together on GPU 0: they share
    runs.add(bed.run_step(calls, gpus={"a": 0, "b": 1}))  # the same options, apart
    apart, together = sorted(runs.replays(["ocr", "ocr"]), key=lambda r: max(r.seen_ms))
    assert apart.gpus == {"c0": 0, "c1": 1} and together.gpus == {"c0": 0, "c1": 0}
    assert max(together.seen_ms) > max(apart.seen_ms)  # 0.6 + 0.6 of one GPU: slower
    for shape in (["llm"], ["llm", "ocr"], ["ocr"]):
        runs.add(bed.run_step([(f"c{i}", t, "gpu_queued") for i, t in enumerate(shape)]))
    assert len(runs) == 2 and runs.replays(["ocr", "ocr"]) == []


def test_perf_times_decisions_on_several_gpus() -> None:
    from langgraph_devsched._dev.perf.decisions import measure_decisions, workload

    bed, _ = workload(4, gpus=4)
    assert [(g.vram_mb, g.speed) for g in bed.gpus] == [(24000, 1.0), (12000, 2.0)] * 2
    (row,) = measure_decisions(["monitor"], sizes=[4], samples=1, warmup=1, gpus=4)
    assert row["error"] is None and row["fresh_p50_ms"] > 0
