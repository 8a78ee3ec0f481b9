"""A model shared by tools pinned to different GPUs is warm only where its tool can use it:
the policy warms a copy, in idle time, on a GPU the other tool may run on."""

from __future__ import annotations

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import Scenario


def _pinned_apart() -> Scenario:
    """``detect`` may run only on GPU 0 and ``caption`` only on GPU 1; both call the 3 GB
    model ``vlm`` (2 s to load on a GPU). ``detect`` runs every step from the first;
    ``caption`` first at step 5. The agent thinks 3 s between steps."""
    shared = {"weights_mb": 3000, "load_gpu_ms": 2000, "load_cpu_ms": 800, "model": "vlm"}
    return Scenario.model_validate({
        "name": "pinned_apart", "category": "residency",
        "testbed": {"gpus": [{"vram_mb": 8000}, {"vram_mb": 8000}], "cpu_cores": 8,
                    "physics": "time_slicing"},
        "tools": {
            "detect": {"hints": {"gpus": [0]}, "params": {
                "cpu_ms": 1500, "gpu_ms": 60, "transfer_ms": 5, "vram_mb": 800,
                "gpu_share": 0.6, "cpu_threads": 2, **shared}},
            "caption": {"hints": {"gpus": [1]}, "params": {
                "cpu_ms": 2500, "gpu_ms": 120, "transfer_ms": 5, "vram_mb": 1000,
                "gpu_share": 0.6, "cpu_threads": 2, **shared}}},
        "workload": {"kind": "sequence", "rounds": 1, "think_ms": 3000.0, "batches": [
            ["detect"], ["detect"], ["detect"], ["detect"], ["caption"], ["detect"],
            ["caption"]]},
    })


def test_a_model_warm_only_where_its_tool_may_not_run_is_warmed_where_it_may() -> None:
    """``vlm`` is warm on GPU 0 from the first steps (``detect``'s). ``caption`` may not run
    there: the idle time before its first call warms a copy on GPU 1, so that call runs warm
    (before: it paid the 2 s load, or 2.5 s on the CPU; gen-s2-93, the same case on four
    GPUs, ran 2.58x its whole-run reference)."""
    result = run_scenario(_pinned_apart(), ["monitor"], decision_cost="none")
    monitor = result.results["monitor"]
    assert result.total_reference_exact
    assert monitor.final_devices["b4/caption"] == "cuda:1"
    assert monitor.total_ratio is not None and monitor.total_ratio <= 1.10, (
        monitor.round_makespans_ms, result.total_reference_ms)
    assert monitor.preloads_wasted == 0
