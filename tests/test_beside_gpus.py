"""Loads beside a step on several GPUs: the monitor policy starts a cold model's load on the
GPU a step leaves idle, the whole-run reference searches the same loads (`bench.horizon_gpus`),
and the run is the reference's plan."""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import Scenario


def _two_gpus(gpu0_mb: int) -> Scenario:
    """GPU 0 holds a small ``embed`` model, which every step runs there (its hints allow no
    other device); a cold 6.7 GB model ``t0`` (3.1 s to load, 1.5 s a call saved warm) that
    every step also calls fits beside it only on GPU 1 (16 GB). Steps back to back: no think
    time to load in."""
    return Scenario.model_validate({
        "name": "beside_gpus", "category": "residency",
        "testbed": {"gpus": [{"vram_mb": gpu0_mb, "resident": ["embed"]}, {"vram_mb": 16000}],
                    "cpu_cores": 8, "physics": "time_slicing"},
        "tools": {
            "t0": {"params": {
                "cpu_ms": 1533, "gpu_ms": 57.1, "transfer_ms": 2.6, "vram_mb": 1386,
                "gpu_share": 0.7, "cpu_threads": 2, "weights_mb": 6659, "load_gpu_ms": 3134,
                "load_cpu_ms": 977}},
            "embed": {"hints": {"cpu_allowed": False, "gpus": [0]}, "params": {
                "cpu_ms": 400, "gpu_ms": 20, "vram_mb": 500, "weights_mb": 1000,
                "load_gpu_ms": 600, "load_cpu_ms": 200}}},
        "workload": {"kind": "sequence", "batches": [["t0", "embed"]] * 12, "rounds": 1,
                     "think_ms": 0.0},
    })


@pytest.mark.parametrize("gpu0_mb", [4000, 9000])
def test_on_two_gpus_a_cold_model_loads_beside_a_step_on_the_gpu_it_leaves_idle(
        gpu0_mb: int) -> None:
    """Step 1 runs ``t0`` on the CPU (2.5 s with its host load) and ``embed`` on GPU 0 while
    ``t0`` loads on GPU 1, idle; step 2 waits for the rest of that load (0.6 s) and finds it
    warm there. With 9 GB on GPU 0 the load fits beside ``embed``'s step there, but not the
    two models' calls after: it still goes to GPU 1. The run is the whole-run reference's
    plan, which searches the same loads (at 4a53f13 neither did: the monitor paid 2.0x)."""
    result = run_scenario(_two_gpus(gpu0_mb), ["static", "heft", "monitor"],
                          decision_cost="none")
    monitor = result.results["monitor"]
    assert result.total_reference_exact
    assert result.total_reference_ms == pytest.approx(3790.7)
    assert monitor.preloads_beside == 1 and monitor.preloads_wasted == 0
    assert monitor.preload_delay_ms == pytest.approx(3134 - 2510, abs=1.0)
    assert monitor.total_ratio == pytest.approx(1.0)
    assert monitor.final_devices["b1/t0"] == "cuda:1"
    assert monitor.final_devices["b1/embed"] == "cuda:0"
    for r in result.results.values():
        assert r.total_ratio is not None and r.total_ratio >= 1.0 - 1e-9
    # loading with the first step (static) pays the load on the critical path
    assert result.results["static"].total_ms > monitor.total_ms + 50.0
