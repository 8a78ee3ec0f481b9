"""Contention physics of the testbed and the batched simulator (issue 16)."""

from __future__ import annotations

import itertools
import random

import pytest

from langgraph_devsched.batchsim import PHYSICS
from langgraph_devsched.bench.scenario import (
    ScenarioError,
    load_scenarios,
    parse_physics,
    under_physics,
)
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

np = pytest.importorskip("numpy")


def steps(calls: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    return [(f"c{i}", tool, option) for i, (tool, option) in enumerate(calls)]


# the worked example of docs/physics.md: two calls side by side on the GPU
EXAMPLE = {
    "a": ToolParams(cpu_ms=300, gpu_ms=100, vram_mb=100, gpu_share=0.5),
    "b": ToolParams(cpu_ms=300, gpu_ms=60, transfer_ms=10, vram_mb=100, gpu_share=0.5),
}


@pytest.mark.parametrize(("physics", "ends"), [
    ("processor_sharing", [100.0, 70.0]),
    ("time_slicing", [160.0, 130.0]),
    ("idle_queue", [100.0, 160.0]),
    ("bandwidth", [130.0, 100.0]),
])
def test_worked_example_of_each_physics(physics: str, ends: list[float]) -> None:
    bed = SimulatedTestbed(EXAMPLE, vram_budget_mb=1000, physics=physics)  # type: ignore[arg-type]
    rec = bed.simulate(steps([("a", "gpu_now"), ("b", "gpu_now")]))
    assert [c.end_ms for c in rec.calls] == ends
    assert bed.mapping_makespans(["a", "b"], [("gpu_now", "gpu_now")]).tolist() == [max(ends)]


def test_slice_overhead_and_mem_bound_tune_their_physics() -> None:
    slow = SimulatedTestbed(EXAMPLE, vram_budget_mb=1000, physics="time_slicing",
                            slice_overhead=0.1)
    # 10 ms alone, then both at 1/2.2: b's 60 ms take 132, a's last 30 alone
    rec = slow.simulate(steps([("a", "gpu_now"), ("b", "gpu_now")]))
    assert [round(c.end_ms, 9) for c in rec.calls] == [172.0, 142.0]
    own = dict(EXAMPLE, b=EXAMPLE["b"].model_copy(update={"mem_bound": 0.0}))
    bed = SimulatedTestbed(own, vram_budget_mb=1000, physics="bandwidth", mem_bound=1.0)
    # shares 0.5*2 + 0.5*1 = 1.5 while both compute: as in the default (0.5 each) case
    rec = bed.simulate(steps([("a", "gpu_now"), ("b", "gpu_now")]))
    assert [c.end_ms for c in rec.calls] == [130.0, 100.0]
    none = SimulatedTestbed(EXAMPLE, vram_budget_mb=1000, physics="bandwidth", mem_bound=0.0)
    rec = none.simulate(steps([("a", "gpu_now"), ("b", "gpu_now")]))
    assert [c.end_ms for c in rec.calls] == [100.0, 70.0]  # not memory-bound: sharing


def test_idle_queue_serves_the_call_computing_longest_and_cpu_is_untouched() -> None:
    tools = {
        "x": ToolParams(cpu_ms=40, gpu_ms=30, gpu_share=0.2),
        "y": ToolParams(cpu_ms=40, gpu_ms=30, gpu_share=0.2),
        "z": ToolParams(cpu_ms=40, gpu_ms=30, gpu_share=0.2),
    }
    bed = SimulatedTestbed(tools, vram_budget_mb=1000, physics="idle_queue")
    rec = bed.simulate(steps([("x", "gpu_now"), ("y", "gpu_queued"), ("z", "cpu")]))
    assert [c.end_ms for c in rec.calls] == [30.0, 60.0, 40.0]
    assert [c.start_ms for c in rec.calls] == [0.0, 0.0, 0.0]  # y was admitted, then waited


def test_unknown_physics_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: processor_sharing, time_slicing"):
        SimulatedTestbed(EXAMPLE, vram_budget_mb=1000, physics="mps")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slice_overhead"):
        SimulatedTestbed(EXAMPLE, vram_budget_mb=1000, slice_overhead=-1)


def random_bed(rng: random.Random, n_tools: int, physics: str) -> SimulatedTestbed:
    models = ["m0", "m1"]
    tools = {}
    for i in range(n_tools):
        model = rng.choice([None, None, *models])
        tools[f"t{i}"] = ToolParams(
            cpu_ms=rng.choice([9, 50, 120.5, 300]),
            gpu_ms=rng.choice([0, 5, 20, 60, 150.3]),
            transfer_ms=rng.choice([0, 0, 3, 40]),
            vram_mb=rng.choice([0, 200, 900, 2500]),
            gpu_share=rng.choice([0.1, 0.35, 0.6, 1.0]),
            cpu_threads=rng.choice([1, 1, 2]),
            model=model,
            weights_mb=0.0 if model is None else 1000.0 + 1500 * models.index(model),
            load_gpu_ms=0.0 if model is None else 10.0 + 70 * models.index(model),
            load_cpu_ms=0.0 if model is None else [0.0, 45.0][models.index(model)],
            mem_bound=rng.choice([None, 0.0, 0.3, 1.0]),
        )
    return SimulatedTestbed(
        tools,
        vram_budget_mb=rng.choice([3000, 8000]),
        cpu_cores=rng.choice([1, 2, 4]),
        background=BackgroundLoad(vram_mb=rng.choice([0, 500]),
                                  gpu_share=rng.choice([0, 0.3])),
        oom_detect_ms=rng.choice([0, 20]),
        physics=physics,  # type: ignore[arg-type]
        slice_overhead=rng.choice([0.0, 0.07]),
        mem_bound=rng.choice([0.0, 0.5]),
    )


@pytest.mark.parametrize("physics", PHYSICS)
def test_batched_simulation_is_bit_identical_under_every_physics(physics: str) -> None:
    rng = random.Random(16 + PHYSICS.index(physics))
    differs = 0
    for _ in range(25):
        n = rng.randint(1, 5)
        bed = random_bed(rng, n, physics)
        tools = [rng.choice(bed.tool_names) for _ in range(n)]
        combos = list(itertools.product(DEVICE_OPTIONS, repeat=n))
        for _round in range(2):  # resident models carried across steps
            fast = bed.product_makespans(tools, [DEVICE_OPTIONS] * n).tolist()
            slow = [bed.makespan(steps(list(zip(tools, m, strict=True)))) for m in combos]
            assert fast == slow
            codes = np.array([[DEVICE_OPTIONS.index(o) for o in m] for m in combos],
                             dtype=np.int8)
            assert (bed.lower_bounds(tools, codes) <= np.array(slow)).all()
            pruned = bed.product_makespans(tools, [DEVICE_OPTIONS] * n, prune=True)
            assert pruned.min() == min(slow)
            starts, ends = bed.call_times(tools, codes)
            for row in rng.sample(range(len(combos)), min(4, len(combos))):
                rec = bed.simulate(steps(list(zip(tools, combos[row], strict=True))))
                assert starts[row].tolist() == [c.start_ms for c in rec.calls]
                assert ends[row].tolist() == [c.end_ms for c in rec.calls]
            if physics != "processor_sharing":
                ps = SimulatedTestbed(
                    {t: bed._params[t] for t in bed.tool_names},
                    vram_budget_mb=bed.vram_budget_mb, cpu_cores=bed.cpu_cores,
                    background=bed._background, oom_detect_ms=bed._oom_detect_ms)
                ps.restore(bed.residency())
                differs += ps.product_makespans(tools, [DEVICE_OPTIONS] * n).tolist() != fast
            bed.run_step(steps(list(zip(tools, rng.choice(combos), strict=True))))
    if physics != "processor_sharing":
        assert differs > 5  # the physics changed the outcome of many cases


def test_scenarios_take_a_physics_and_bench_labels_each() -> None:
    builtin = load_scenarios()
    assert all(s.physics == "processor_sharing" for s in builtin)
    assert parse_physics("all") == list(PHYSICS)
    assert parse_physics("idle_queue, bandwidth") == ["idle_queue", "bandwidth"]
    with pytest.raises(ValueError, match="valid: processor_sharing"):
        parse_physics("fair")
    runs = under_physics(builtin[:2], "all")
    assert [s.name for s in runs[:3]] == [
        f"{builtin[0].name}@processor_sharing", f"{builtin[1].name}@processor_sharing",
        f"{builtin[0].name}@time_slicing"]
    assert runs[2].make_testbed().physics == "time_slicing"


def test_scenario_file_physics_field(tmp_path: object) -> None:
    from pathlib import Path

    from langgraph_devsched.bench.scenario import load_scenario

    folder = Path(str(tmp_path))
    text = ("name: ts\ncategory: parallel\ntestbed: {vram_budget_mb: 8000, physics: %s}\n"
            "tools: {a: {params: {cpu_ms: 90, gpu_ms: 30}}}\n"
            "workload: {kind: parallel, calls: [a, a]}\n")
    (folder / "ok.yaml").write_text(text % "time_slicing", encoding="utf-8")
    assert load_scenario(folder / "ok.yaml").make_testbed().physics == "time_slicing"
    (folder / "bad.yaml").write_text(text % "fair_share", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"testbed\.physics: expected one of"):
        load_scenario(folder / "bad.yaml")


def test_bench_command_runs_each_physics_and_summarises_per_physics(tmp_path: object) -> None:
    import json
    from pathlib import Path

    from langgraph_devsched.bench.command import run_bench_command
    from langgraph_devsched.bench.report import physics_markdown

    folder = Path(str(tmp_path))
    (folder / "pair.yaml").write_text(
        "name: pair\ncategory: parallel\ntestbed: {vram_budget_mb: 8000, noise: 0}\n"
        "tools:\n  a: {params: {cpu_ms: 150, gpu_ms: 100, gpu_share: 0.5}}\n"
        "  b: {params: {cpu_ms: 110, gpu_ms: 60, transfer_ms: 10, gpu_share: 0.5}}\n"
        "workload: {kind: parallel, calls: [a, b], rounds: 2}\n", encoding="utf-8")
    out = folder / "out.json"
    result = run_bench_command(scenarios=folder / "pair.yaml", schedulers=["all_gpu", "oracle"],
                               json_path=out, physics="processor_sharing,idle_queue")
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [s["name"] for s in data["scenarios"]] == ["pair@processor_sharing",
                                                      "pair@idle_queue"]
    assert [s["physics"] for s in data["scenarios"]] == ["processor_sharing", "idle_queue"]
    by = data["summary_by_physics"]
    # both on the GPU: 100 ms when shared, 160 ms served one at a time (b to the CPU: 110)
    assert by["processor_sharing"]["all_gpu"]["optimal"] == 1
    assert by["idle_queue"]["all_gpu"]["optimal"] == 0
    assert data["scenarios"][1]["optimal_makespan_ms"] == 110.0
    assert "| pair | ✓ 1.000 | ✓ 1.000 | ✗ 1.455 | ✓ 1.000 |" in physics_markdown(result)
