"""``keep_warm`` in the simulator: a kept model is never evicted for another, in the testbed,
the batched simulator, the scenario format and the monitor's twin (as in the real ledger)."""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.testbed import SimulatedTestbed
from tests.test_residency_sim import steps, visual_tools

pytest.importorskip("numpy")


def test_a_kept_model_is_not_evicted_and_the_other_goes_to_the_cpu() -> None:
    kept = SimulatedTestbed(visual_tools(), vram_budget_mb=9000, resident={"gpu": ["edit"]},
                            keep_warm={"edit"})
    rec = kept.run_step(steps([("t2i", "gpu_now")]))
    call = rec.calls[0]
    assert call.device == "cpu" and call.fallback == "oom" and rec.evictions == 0
    assert [(w.model, w.keep_warm) for w in kept.device_state().resident
            if w.side == "gpu"] == [("edit", True)]
    plain = SimulatedTestbed(visual_tools(), vram_budget_mb=9000, resident={"gpu": ["edit"]})
    assert plain.run_step(steps([("t2i", "gpu_now")])).calls[0].evicted == ("edit",)


@pytest.mark.parametrize("option", ["gpu_now", "gpu_queued", "cpu"])
def test_the_batched_simulator_agrees_with_the_testbed(option: str) -> None:
    bed = SimulatedTestbed(visual_tools(), vram_budget_mb=9000, resident={"gpu": ["edit"]},
                           keep_warm={"edit"})
    tools = ["t2i", "edit", "fft"]
    mappings = [(option, "gpu_now", "cpu"), ("gpu_queued", option, "gpu_now")]
    batched = [float(x) for x in bed.mapping_makespans(tools, mappings)]
    one_by_one = [bed.makespan(list(zip(("a", "b", "c"), tools, m, strict=True)))
                  for m in mappings]
    assert batched == one_by_one


def test_a_scenario_tools_keep_warm_hint_reaches_the_testbed() -> None:
    s = Scenario.model_validate({
        "name": "kept", "category": "memory",
        "testbed": {"vram_budget_mb": 9000, "resident": {"gpu": ["edit"]}},
        "tools": {
            "edit": {"params": {"cpu_ms": 4000, "gpu_ms": 300, "vram_mb": 1000,
                                "weights_mb": 6600}, "hints": {"keep_warm": True}},
            "t2i": {"params": {"cpu_ms": 5000, "gpu_ms": 400, "vram_mb": 1000,
                               "weights_mb": 6700}},
        },
        "workload": {"kind": "serial", "calls": ["t2i"]},
    })
    assert s.kept_warm() == {"edit"}
    call = s.make_testbed(noise=0.0).run_step(steps([("t2i", "gpu_now")])).calls[0]
    assert call.device == "cpu" and call.evicted == ()


def test_the_monitors_twin_keeps_what_telemetry_says_is_kept() -> None:
    from langgraph_devsched.schedulers.policy.model import twin

    bed = SimulatedTestbed(visual_tools(), vram_budget_mb=9000, resident={"gpu": ["edit"]},
                           keep_warm={"edit"})
    model = twin(visual_tools(), bed.device_state(), oom_ms=20.0)
    call = model.run_step(steps([("t2i", "gpu_now")])).calls[0]
    assert call.device == "cpu" and call.evicted == ()
