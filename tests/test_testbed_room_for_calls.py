"""A GPU call without a model gets room for its working memory by evicting idle models, in
the simulated testbed and the batched simulator alike, as the real VRAM ledger gives it.

Seen on the generated workload gen-s2-17 (2.2 GB GPU): with m2 (727 MB) and m0 (883 MB)
resident, tool t1 (no model, 1178 MB of working memory) placed on the GPU fell back to the
CPU (472.5 ms) in the testbed, where the ledger evicts idle m2 (least recently used) and runs
it on the GPU (24 ms); the monitor, whose twin is the testbed, then kept t1 on the CPU.
"""

from __future__ import annotations

import itertools
import random

import pytest

from langgraph_devsched.bench.generate import generated_scenario
from langgraph_devsched.ledger import VramLedger, WeightsNeed
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.testbed import SimulatedTestbed
from tests.test_residency_sim import random_bed, steps

np = pytest.importorskip("numpy")


def crowded(keep_warm: frozenset[str] = frozenset()) -> SimulatedTestbed:
    """gen-s2-17 after its first two steps: m2 then m0 resident (m2 least recently used);
    t1 has no model and needs 1178 MB, 591 MB are free."""
    s = generated_scenario(2, 17)
    bed = s.make_testbed(noise=0.0)
    if keep_warm:
        bed = SimulatedTestbed({n: e.params for n, e in s.tools.items()},
                               vram_budget_mb=s.testbed.vram_budget_mb,
                               cpu_cores=s.testbed.cpu_cores, keep_warm=keep_warm)
    bed.run_step([("a", "t2", "gpu_now")])
    bed.run_step([("b", "t0", "gpu_now")])
    assert [m for m, _ in bed.residency().gpu] == ["m2", "m0"]
    return bed


def gpu_models(bed: SimulatedTestbed) -> list[str]:
    return [m for m, _ in bed.residency().gpu]


@pytest.mark.parametrize("option", ["gpu_now", "gpu_queued"])
def test_a_call_without_a_model_evicts_the_least_recently_used_idle_model(option: str) -> None:
    bed = crowded()
    rec = bed.run_step([("c", "t1", option)])
    call = rec.calls[0]
    assert (call.device, call.fallback, call.evicted) == ("cuda:0", None, ("m2",))
    assert rec.makespan_ms == pytest.approx(4.7 + 19.2)  # not the CPU's 472.5 ms
    assert gpu_models(bed) == ["m0"]


def test_a_model_the_same_step_uses_on_the_gpu_is_not_evicted() -> None:
    bed = crowded()
    rec = bed.run_step([("c", "t1", "gpu_queued"), ("d", "t2", "gpu_now")])
    by_id = rec.by_id()
    assert by_id["c"].device == by_id["d"].device == "cuda:0"
    assert by_id["c"].evicted == ("m0",)  # m2 is least recently used, but the step uses it
    assert gpu_models(bed) == ["m2"]


def test_a_kept_warm_model_is_not_evicted() -> None:
    bed = crowded(keep_warm=frozenset({"m2"}))
    rec = bed.run_step([("c", "t1", "gpu_queued")])
    assert (rec.calls[0].device, rec.calls[0].evicted) == ("cuda:0", ("m0",))
    assert gpu_models(bed) == ["m2"]


@pytest.mark.parametrize(("option", "fallback"), [("gpu_now", "oom"),
                                                  ("gpu_queued", "vram_over_budget")])
def test_it_falls_back_only_when_no_eviction_makes_room(option: str, fallback: str) -> None:
    kept = crowded(keep_warm=frozenset({"m0", "m2"})).run_step([("c", "t1", option)])
    assert (kept.calls[0].device, kept.calls[0].fallback, kept.evictions) == (
        "cpu", fallback, 0)
    # both resident models used on the GPU by the same step: neither may go
    bed = crowded()
    rec = bed.run_step([("a", "t2", "gpu_now"), ("b", "t0", "gpu_now"), ("c", "t1", option)])
    assert (rec.by_id()["c"].device, rec.by_id()["c"].fallback, rec.evictions) == (
        "cpu", fallback, 0)
    assert gpu_models(bed) == ["m2", "m0"]


def every_mapping(tools: list[str]) -> list[tuple[str, ...]]:
    return list(itertools.product(DEVICE_OPTIONS, repeat=len(tools)))


@pytest.mark.parametrize("keep_warm", [frozenset(), frozenset({"m2"}), frozenset({"m0", "m2"})])
def test_the_batched_simulator_agrees_with_the_testbed(keep_warm: frozenset[str]) -> None:
    tools = ["t1", "t2", "t0", "t1"]
    mappings = every_mapping(tools)
    bed = crowded(keep_warm)
    batched = [float(x) for x in bed.mapping_makespans(tools, mappings)]
    evictions = bed.mapping_evictions(tools, mappings)
    codes = np.array([[DEVICE_OPTIONS.index(o) for o in m] for m in mappings], dtype=np.int8)
    index, states = bed.codes_residencies(tools, codes)
    start = bed.residency()
    freed = 0
    for row, mapping in enumerate(mappings):
        calls = [(f"c{i}", t, o) for i, (t, o) in enumerate(zip(tools, mapping, strict=True))]
        assert batched[row] == bed.makespan(calls), mapping
        rec = bed.run_step(calls)
        assert evictions[row] == tuple(e for c in rec.calls for e in c.evicted), mapping
        assert states[int(index[row])].gpu == bed.residency().gpu, mapping
        freed += sum(len(c.evicted) for c in rec.calls if c.model is None)
        bed.restore(start)
    assert (freed > 0) == (keep_warm != {"m0", "m2"})


def test_random_testbeds_agree_and_calls_without_a_model_evict() -> None:
    rng = random.Random(34)
    freed = 0
    for _ in range(40):
        n = rng.randint(1, 4)
        bed = random_bed(rng, n)
        for _round in range(3):
            tools = [rng.choice(bed.tool_names) for _ in range(n)]
            combos = every_mapping(tools)
            fast = bed.product_makespans(tools, [DEVICE_OPTIONS] * n).tolist()
            assert fast == [bed.makespan(steps(list(zip(tools, m, strict=True))))
                            for m in combos]
            pick = rng.choice(combos)
            rec = bed.simulate(steps(list(zip(tools, pick, strict=True))))
            assert bed.mapping_evictions(tools, [pick]) == [
                tuple(e for c in rec.calls for e in c.evicted)]
            rec = bed.run_step(steps(list(zip(tools, pick, strict=True))))
            freed += sum(len(c.evicted) for c in rec.calls if c.model is None)
    assert freed > 0  # the cases exercised calls without a model making room


def test_the_real_ledger_is_the_reference() -> None:
    """The same case through `VramLedger`: the rule the testbed follows."""
    for kept, evicted in ((False, ("m2",)), (True, ("m0",))):
        ledger = VramLedger(budget_mb=2200)
        ledger.release(ledger.reserve(593.3, 0.2, need=WeightsNeed("m2", 726.7, kept)))
        ledger.release(ledger.reserve(437.4, 0.9, need=WeightsNeed("m0", 882.6)))
        res = ledger.try_reserve(1178.1, 0.3)  # t1: no model
        assert res is not None and res.evicted == evicted
        res.release()
    ledger = VramLedger(budget_mb=2200)
    for name, mb in (("m2", 726.7), ("m0", 882.6)):
        ledger.release(ledger.reserve(100, 0.1, need=WeightsNeed(name, mb, keep_warm=True)))
    assert ledger.try_reserve(1178.1, 0.3) is None
