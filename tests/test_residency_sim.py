"""Resident models in the simulated testbed and the batched simulator (issue 14)."""

from __future__ import annotations

import itertools
import random

import pytest

from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

np = pytest.importorskip("numpy")


def steps(calls: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    return [(f"c{i}", tool, option) for i, (tool, option) in enumerate(calls)]


def visual_tools() -> dict[str, ToolParams]:
    return {
        "edit": ToolParams(cpu_ms=4000, gpu_ms=300, vram_mb=1000, weights_mb=6600,
                           load_gpu_ms=900, load_cpu_ms=2000),
        "t2i": ToolParams(cpu_ms=5000, gpu_ms=400, vram_mb=1000, weights_mb=6700,
                          load_gpu_ms=1000, load_cpu_ms=2500),
        "fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40),
    }


def two_models(**kw: object) -> SimulatedTestbed:
    return SimulatedTestbed(visual_tools(), vram_budget_mb=16000, cpu_cores=4,
                            **kw)  # type: ignore[arg-type]


def test_cold_gpu_call_waits_for_its_load_then_the_weights_stay() -> None:
    bed = two_models()
    first = bed.run_step(steps([("edit", "gpu_now")])).calls[0]
    assert (first.model, first.loaded, first.load_ms, first.evicted) == ("edit", True, 900.0, ())
    assert first.latency_ms == 900 + 300
    second = bed.run_step(steps([("edit", "gpu_now")])).calls[0]
    assert (second.loaded, second.load_ms, second.latency_ms) == (False, 0.0, 300.0)
    assert [(w.model, w.side) for w in bed.device_state().resident] == [("edit", "gpu")]
    assert bed.device_state().warm("edit") and not bed.device_state().warm("edit", "cpu")


def test_weights_that_do_not_fit_evict_the_least_recently_used_model() -> None:
    bed = two_models(resident={"gpu": ["edit"]})
    # 16000 - 6600 resident leaves 9400: t2i's 6700 fit; both together are 13300
    rec = bed.run_step(steps([("t2i", "gpu_now")]))
    assert rec.calls[0].evicted == () and rec.loads == 1
    # the step's working memory is admitted against what the weights leave
    held = bed.device_state().resident
    assert sum(w.weights_mb for w in held) == 13300
    small = SimulatedTestbed(visual_tools(), vram_budget_mb=9000, resident={"gpu": ["edit"]})
    rec = small.run_step(steps([("t2i", "gpu_now")]))
    assert rec.calls[0].evicted == ("edit",) and rec.evictions == 1
    assert [w.model for w in small.device_state().resident] == ["t2i"]


def test_two_models_of_one_step_never_evict_each_other() -> None:
    bed = SimulatedTestbed(visual_tools(), vram_budget_mb=9000)
    rec = bed.run_step(steps([("edit", "gpu_now"), ("t2i", "gpu_now"), ("t2i", "gpu_queued")]))
    edit, t2i, t2i_q = rec.calls
    assert edit.on_gpu and edit.loaded
    # t2i gets no room (edit is protected): gpu_now takes the OOM path, queued goes to the CPU
    assert (t2i.fallback, t2i_q.fallback) == ("oom", "vram_over_budget")
    # not in host memory: the queued call, on the CPU at once, starts the host load at 0;
    # the OOM fallback joins it after the 20 ms detection
    assert (t2i_q.loaded, t2i_q.load_ms) == (True, 2500)
    assert (t2i.loaded, t2i.load_ms) == (False, 2500 - 20)
    assert {(w.model, w.side) for w in bed.device_state().resident} == {
        ("edit", "gpu"), ("t2i", "cpu")}


def test_cpu_calls_pay_the_host_load_once_and_not_after() -> None:
    bed = two_models()
    rec = bed.run_step(steps([("edit", "cpu"), ("edit", "cpu")]))
    assert [c.load_ms for c in rec.calls] == [2000, 2000]
    assert [c.loaded for c in rec.calls] == [True, False]
    rec = bed.run_step(steps([("edit", "cpu")]))
    assert rec.calls[0].load_ms == 0 and rec.calls[0].latency_ms == 4000


def test_no_models_means_todays_results_and_state_can_be_restored() -> None:
    bed = two_models(resident={"gpu": ["edit"], "cpu": ["t2i"]})
    saved = bed.residency()
    before = bed.makespan(steps([("t2i", "gpu_now")]))
    assert bed.residency() == saved  # evaluating changes nothing
    bed.run_step(steps([("t2i", "gpu_now")]))
    assert bed.residency() != saved
    bed.restore(saved)
    assert bed.makespan(steps([("t2i", "gpu_now")])) == before
    assert bed.run_step(steps([("fft", "cpu")])).calls[0].model is None


def test_initial_residency_is_checked() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'llm'.*edit, t2i"):
        two_models(resident={"gpu": ["llm"]})
    with pytest.raises(ValueError, match="do not fit"):
        two_models(resident={"gpu": ["edit", "t2i"]}, background=BackgroundLoad(vram_mb=4000))
    with pytest.raises(ValueError, match="must agree"):
        SimulatedTestbed({"a": ToolParams(cpu_ms=1, gpu_ms=1, model="m", weights_mb=10),
                          "b": ToolParams(cpu_ms=1, gpu_ms=1, model="m", weights_mb=20)},
                         vram_budget_mb=100)


def random_bed(rng: random.Random, n_tools: int) -> SimulatedTestbed:
    models = ["m0", "m1", "m2"]
    tools = {}
    for i in range(n_tools):
        model = rng.choice([None, *models])
        tools[f"t{i}"] = ToolParams(
            cpu_ms=rng.choice([9, 50, 120.5, 300, 800]),
            gpu_ms=rng.choice([0, 5, 20, 60, 150.3]),
            transfer_ms=rng.choice([0, 0, 3, 40]),
            vram_mb=rng.choice([0, 200, 900, 2500]),
            gpu_share=rng.choice([0.1, 0.35, 0.6, 1.0]),
            cpu_threads=rng.choice([1, 1, 2]),
            model=model,
            weights_mb=0.0 if model is None else 1000.0 + 1500 * models.index(model),
            load_gpu_ms=0.0 if model is None else 10.0 + 70 * models.index(model),
            load_cpu_ms=0.0 if model is None else [0.0, 45.0, 250.0][models.index(model)],
        )
    known = sorted({p.model for p in tools.values() if p.model is not None})
    budget = rng.choice([5000, 8000, 12000])
    gpu = [m for m in known if rng.random() < 0.4]
    while sum(1000.0 + 1500 * models.index(m) for m in gpu) > budget - 1000:
        gpu.pop()
    host = [m for m in known if rng.random() < 0.3]
    return SimulatedTestbed(
        tools,
        vram_budget_mb=budget,
        cpu_cores=rng.choice([1, 2, 4]),
        background=BackgroundLoad(vram_mb=rng.choice([0, 1000]),
                                  gpu_share=rng.choice([0, 0.3])),
        oom_detect_ms=rng.choice([0, 20]),
        resident={"gpu": gpu, "cpu": host},
    )


def test_batched_residency_is_bit_identical_to_the_event_simulation() -> None:
    rng = random.Random(14)
    loads = evictions = 0
    for _ in range(40):
        n = rng.randint(1, 5)
        bed = random_bed(rng, n)
        for _round in range(3):  # state carried across steps
            tools = [rng.choice(bed.tool_names) for _ in range(n)]
            combos = list(itertools.product(DEVICE_OPTIONS, repeat=n))
            fast = bed.product_makespans(tools, [DEVICE_OPTIONS] * n).tolist()
            slow = [bed.makespan(steps(list(zip(tools, m, strict=True)))) for m in combos]
            assert fast == slow
            lb = bed.lower_bounds(tools, np.array(
                [[DEVICE_OPTIONS.index(o) for o in m] for m in combos], dtype=np.int8))
            assert (lb <= np.array(slow)).all()
            pruned = bed.product_makespans(tools, [DEVICE_OPTIONS] * n, prune=True)
            best = min(slow)
            assert pruned.min() == best
            assert [i for i, s in enumerate(slow) if s == best] == [
                int(i) for i in np.flatnonzero(pruned == best)]
            pick = rng.choice(combos)
            codes = np.array([[DEVICE_OPTIONS.index(o) for o in pick]], dtype=np.int8)
            starts, ends = bed.call_times(tools, codes)
            rec = bed.simulate(steps(list(zip(tools, pick, strict=True))))
            assert starts[0].tolist() == [c.start_ms for c in rec.calls]
            assert ends[0].tolist() == [c.end_ms for c in rec.calls]
            assert bed.mapping_evictions(tools, [pick]) == [
                tuple(e for c in rec.calls for e in c.evicted)]
            rec = bed.run_step(steps(list(zip(tools, pick, strict=True))))
            loads += rec.loads
            evictions += rec.evictions
    assert loads > 20 and evictions > 5  # the cases exercised residency
