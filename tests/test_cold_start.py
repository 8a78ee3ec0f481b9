"""Cold start: the monitor policy with nothing declared (``declare="none"``) starts well.

Each test drives the bench runner (or the policy's public model) on a small scenario and
fails on the old guesses: an unknown tool guessed at 100 ms on the GPU and 400 ms on the CPU,
a CPU side never measured probed for free, a CPU-only tool's time invented.
"""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.schedulers.policy.model import estimate_params
from tests.builtin_bench import UNBUDGETED

pytest.importorskip("numpy")

FRIENDS = {
    "name": "friends", "category": "memory",
    "testbed": {"vram_budget_mb": 12000, "cpu_cores": 8, "noise": 0.05, "seed": 31},
    "tools": {
        "diffusion": {"params": {"cpu_ms": 24000, "gpu_ms": 420, "transfer_ms": 8,
                                 "vram_mb": 7500, "gpu_share": 1.0, "cpu_threads": 8}},
        "captioner": {"params": {"cpu_ms": 2600, "gpu_ms": 110, "transfer_ms": 5,
                                 "vram_mb": 3000, "gpu_share": 0.85, "cpu_threads": 4}},
        "ocr": {"params": {"cpu_ms": 640, "gpu_ms": 45, "transfer_ms": 9, "vram_mb": 1200,
                           "gpu_share": 0.6, "cpu_threads": 2}},
        "asr": {"params": {"cpu_ms": 2100, "gpu_ms": 95, "transfer_ms": 6, "vram_mb": 2400,
                           "gpu_share": 0.75, "cpu_threads": 4}},
    },
    "workload": {"kind": "parallel", "calls": ["diffusion", "captioner", "ocr", "asr"],
                 "rounds": 1},
}


def test_the_first_step_with_no_profile_keeps_the_gpu_tools_on_the_gpu() -> None:
    """Old: four tools guessed alike, 400 ms on the CPU tied with sharing the GPU, and the
    diffusion model went to the CPU for 24 s."""
    r = run_scenario(Scenario.model_validate(FRIENDS), ["monitor"], declare="none",
                     scheduler_options=UNBUDGETED)
    first = r.results["monitor"]
    assert all(o != "cpu" for o in first.final_mapping.values()), first.final_mapping
    assert first.round_makespans_ms[0] < 1.5 * r.optimal_makespan_ms


VOICE = {
    "name": "voice", "category": "serial",
    "testbed": {"vram_budget_mb": 16000, "cpu_cores": 8, "noise": 0.05, "seed": 3},
    "tools": {"asr": {"params": {"cpu_ms": 2100, "gpu_ms": 95, "transfer_ms": 6,
                                 "vram_mb": 2400, "gpu_share": 0.75, "cpu_threads": 4}}},
    "workload": {"kind": "serial", "calls": ["asr"], "rounds": 6},
}


def test_an_unmeasured_cpu_side_is_not_probed_beyond_the_steps_cost() -> None:
    """Old: the CPU side, never measured nor declared, was probed for free: 2.1 s for a
    step of 0.1 s. Now a probe is priced at the unknown side's pessimistic guess."""
    r = run_scenario(Scenario.model_validate(VOICE), ["monitor"], declare="none",
                     scheduler_options=UNBUDGETED)
    spans = r.results["monitor"].round_makespans_ms
    assert max(spans) < 1.5 * r.optimal_makespan_ms, spans
    assert r.results["monitor"].optimal


LIGHT = {
    "name": "light", "category": "serial",
    "testbed": {"vram_budget_mb": 16000, "cpu_cores": 8, "noise": 0.05, "seed": 11},
    "tools": {"vad": {"params": {"cpu_ms": 9, "gpu_ms": 2, "transfer_ms": 12, "vram_mb": 200,
                                 "gpu_share": 0.1}}},
    "workload": {"kind": "serial", "calls": ["vad"], "rounds": 8},
}


def test_a_light_tools_unknown_cpu_side_is_measured() -> None:
    """Old: 14 ms on the GPU, its CPU side guessed at 4x (56 ms) was never probed (42 ms over
    half the step), so the 9 ms CPU stayed unknown for good. A probe of a light step may cost
    up to `min_probe_ms` once."""
    r = run_scenario(Scenario.model_validate(LIGHT), ["monitor"], declare="none",
                     scheduler_options=UNBUDGETED)
    result = r.results["monitor"]
    assert result.optimal and result.probes == 1, result.round_makespans_ms
    assert max(result.round_makespans_ms) < 60.0  # the probe cost at most its bound


def test_a_cpu_only_tools_cost_is_not_invented() -> None:
    """Old: 400 ms guessed, which alone set the length of every step it was in."""
    p = estimate_params("bm25", ToolDeviceSpec(gpu_capable=False), Observations(step=0),
                        bg_share=0.0)
    assert p.cpu_ms < 1.0


FANOUT = {
    "name": "fanout", "category": "parallel",
    "testbed": {"vram_budget_mb": 24000, "cpu_cores": 8, "noise": 0.05, "seed": 22},
    "tools": {"embedder": {"params": {"cpu_ms": 140, "gpu_ms": 20, "transfer_ms": 4,
                                      "vram_mb": 450, "gpu_share": 0.25, "cpu_threads": 1},
                           "hints": {"idempotent": True}}},
    "workload": {"kind": "parallel", "calls": ["embedder"] * 8, "rounds": 12},
}


def test_a_near_tie_the_twin_cannot_rank_is_tried_and_kept_when_it_measures_lower() -> None:
    """Eight quarter-GPU calls: queued they run four at a time (48 ms); all sharing the GPU
    at once is 44 ms, because the 4 ms copy is not slowed by sharing. With nothing declared
    the twin cannot tell the copy from the compute and scores the two alike; the old policy
    kept the less demanding one, queued, for every round (`schedulers.near_tie`)."""
    result = run_scenario(Scenario.model_validate(FANOUT), ["monitor"], declare="none",
                          scheduler_options=UNBUDGETED)
    spans = result.results["monitor"].round_makespans_ms
    assert result.results["monitor"].optimal, spans
    assert spans[-3:] == [pytest.approx(44.0)] * 3
    assert result.results["monitor"].final_mapping == {f"embedder#{i}": "gpu_now"
                                                        for i in range(8)}
